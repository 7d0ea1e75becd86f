package devstack

import (
	"os"
	"os/exec"
	"testing"
)

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("Alive(self) = false")
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatal("Alive(running child) = false")
	}
	cmd.Process.Kill()
	// Killed but not yet reaped: a zombie, which is not alive.
	for i := 0; i < 1000 && Alive(pid); i++ {
		exec.Command("true").Run() // let the kernel deliver the signal
	}
	if Alive(pid) {
		t.Fatal("Alive(zombie) = true")
	}
	cmd.Wait()
	if Alive(pid) || Alive(0) || Alive(-1) {
		t.Fatal("Alive of a reaped or invalid pid = true")
	}
}

func TestChildEnvDropsCellkitVariables(t *testing.T) {
	t.Setenv("CELLKIT_REGISTRY", "file:/x")
	t.Setenv("KEEP_ME", "1")
	env := ChildEnv()
	var kept bool
	for _, kv := range env {
		if kv == "CELLKIT_REGISTRY=file:/x" {
			t.Fatal("CELLKIT_REGISTRY passed to children")
		}
		kept = kept || kv == "KEEP_ME=1"
	}
	if !kept {
		t.Fatal("other variables dropped")
	}
}
