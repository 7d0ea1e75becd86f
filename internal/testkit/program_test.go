package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// echoProgram is the program this package's test binary runs as in
// TestProgram.
const echoProgram = "echo"

// echoMain prints its arguments, one a line; with "again" first it
// starts its own path with the rest, as the router starts its successor
// (os.Executable, os.Environ), and prints what that prints; with "fail"
// it exits 3.
func echoMain() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "again" {
		exe, err := os.Executable()
		if err == nil {
			cmd := exec.Command(exe, args[1:]...)
			cmd.Env, cmd.Stdout, cmd.Stderr = os.Environ(), os.Stdout, os.Stderr
			err = cmd.Run()
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		return
	}
	if len(args) > 0 && args[0] == "fail" {
		os.Exit(3)
	}
	fmt.Println(strings.Join(args, "\n"))
}

// The test binary runs as the program: its arguments are the program's
// own (test flags among them are not parsed), its exit status is the
// program's, a process it starts from its own path is the program too,
// and a binary asked for a program it does not run refuses.
func TestProgram(t *testing.T) {
	out, err := Program(t, echoProgram, "-test.run=X", "--flag", "b").Output()
	if err != nil || string(out) != "-test.run=X\n--flag\nb\n" {
		t.Fatalf("echo = %q, %v; want its arguments", out, err)
	}
	out, err = Program(t, echoProgram, "again", "c").Output()
	if err != nil || string(out) != "c\n" {
		t.Fatalf("echo started by echo = %q, %v; want its arguments", out, err)
	}
	var exit *exec.ExitError
	if err := Program(t, echoProgram, "fail").Run(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("echo fail: %v, want exit status 3", err)
	}
	out, err = Program(t, "router").CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), `runs only the program "echo"`) {
		t.Fatalf("as a program it does not run: %v, %q; want exit status 2 and why", err, out)
	}
}
