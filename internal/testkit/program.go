package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// EnvProgram names the environment variable that makes a test binary run
// as its package's program instead of its tests (RunAsProgram, Program).
// A variable, not an argument: the program's arguments stay its own
// (os.Args[1:]), and a process the program starts from its own path (the
// router's successor at SIGUSR2) inherits it and runs the program too.
// Not a CELLKIT_ name: the programs list those that set no flag (--check).
const EnvProgram = "TESTKIT_PROGRAM"

// RunAsProgram runs main and exits 0 when it returns, if this test binary
// was started as the program name (by Program); otherwise it returns at
// once. It is the first line of the TestMain of a program's package
// (package main), before VerifyTestMain: the program then runs as its
// binary would, with nothing of the tests around it (no test flags, no
// leak check). main is the program's main.
func RunAsProgram(name string, main func()) {
	switch os.Getenv(EnvProgram) {
	case "":
		return
	case name:
		main()
		os.Exit(0)
	default:
		// Running the tests instead would start them again in every child.
		fmt.Fprintf(os.Stderr, "testkit: %s=%s, but this test binary runs only the program %q\n", EnvProgram, os.Getenv(EnvProgram), name)
		os.Exit(2)
	}
}

// Program is the command that runs this test binary as the program name
// with args: its package's TestMain calls RunAsProgram(name, main). The
// command's environment is the test's with EnvProgram set, and with
// atexit_sleep_ms=0 added to GORACE: a -race binary otherwise sleeps a
// second at every clean exit, which the program's own binary does not.
// The caller sets what else it needs (output, more variables) and starts it.
func Program(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("this test binary's path, to run it as %s: %v", name, err)
	}
	gorace := "atexit_sleep_ms=0"
	if v := os.Getenv("GORACE"); v != "" {
		gorace = v + " " + gorace
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), EnvProgram+"="+name, "GORACE="+gorace)
	return cmd
}
