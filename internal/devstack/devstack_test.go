package devstack

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == handoffProgramArg {
		os.Exit(handoffProgram(os.Args[2:]))
	}
	if os.Getenv(superviseEnv) == "1" {
		os.Exit(superviseMain(os.Args[1:]))
	}
	// Every child's reaper must have returned by the end. Idle keep-alive
	// connections of HTTP clients are not leaks.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	st := &Stack{Dir: dir, Registry: "file:" + dir + "/registry/map.json", APIKey: "ck_secret",
		StartedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Processes: []Process{
			{Name: "agencysim", PID: 10, Bin: "/bin/agencysim", Args: []string{"-x"}},
			{Name: "c1", PID: 11, Addrs: map[string]string{"intake": "127.0.0.1:1"}},
			{Name: "c2", PID: 12},
			{Name: "router", PID: 13},
		}}
	path := StatePath(dir)
	if err := Write(path, st); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("dev.json mode = %v, %v; want 0600 (it holds the API key)", info.Mode().Perm(), err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("Read(Write(st)) = %+v, want %+v", got, st)
	}
	var names []string
	for _, p := range got.Cells() {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"c1", "c2"}) {
		t.Errorf("Cells() = %v, want [c1 c2]", names)
	}
	if p, ok := got.Process("c2"); !ok || p.PID != 12 {
		t.Errorf("Process(c2) = %v, %v", p, ok)
	}
	if _, ok := got.Process("c9"); ok {
		t.Error("Process(c9) found")
	}
	if _, err := Read(filepath.Join(dir, "missing.json")); !os.IsNotExist(err) {
		t.Errorf("Read(missing) = %v, want not exist", err)
	}
}
