package natsembed

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellkit/cellkit/internal/smallfs"
	"github.com/cellkit/cellkit/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func TestPersistsAcrossRestartsAndListensOnLoopback(t *testing.T) {
	dir := t.TempDir()
	log := testkit.Logger()
	srv, err := Start(Config{Name: "t", StoreDir: dir}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.ClientURL())
	if err != nil || u.Port() == "0" {
		t.Fatalf("ClientURL %q", srv.ClientURL())
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Fatalf("listening on %q, want loopback", u.Hostname())
	}
	nc, err := nats.Connect(srv.ClientURL()) // over TCP, as an external client would
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "s", Subjects: []string{"s"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()

	srv, err = Start(Config{Name: "t", StoreDir: dir, Port: -1}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if srv.ClientURL() != "" {
		t.Errorf("ClientURL %q without a listener", srv.ClientURL())
	}
	nc, err = srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	st, err := js.Stream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil || string(m.Data) != "kept" {
		t.Fatalf("after restart: %v %v", m, err)
	}
}

func TestRefusesNonLoopbackAndMissingConfig(t *testing.T) {
	log := testkit.Logger()
	if _, err := Start(Config{Name: "t", StoreDir: t.TempDir(), Host: "0.0.0.0"}, Options{Logger: log}); err == nil {
		t.Error("started on 0.0.0.0")
	}
	if _, err := Start(Config{Name: "t"}, Options{Logger: log}); err == nil {
		t.Error("started without a store dir")
	}
}

// TestClusterStartsAgainOnATakenPort: a route port taken by another
// process between its choice and its node's start leaves that node never
// ready; the cluster is started again on new ports.
func TestClusterStartsAgainOnATakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node JetStream cluster")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	pick, asked := freePort, 0
	freePort = func() (int, error) {
		if asked++; asked == 2 {
			return taken.Addr().(*net.TCPAddr).Port, nil
		}
		return pick()
	}
	t.Cleanup(func() { freePort = pick })
	var dirs []string
	for range 3 {
		dirs = append(dirs, t.TempDir())
	}
	nodes, err := StartCluster(ClusterConfig{Name: "taken", Dirs: dirs, Timeout: 30 * time.Second}, Options{Logger: testkit.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.Shutdown()
	}
	if asked <= 3 {
		t.Errorf("ports asked for: %d, want a second try's", asked)
	}
}

// startCluster starts n clustered nodes, shut down at the end of the test.
func startCluster(t *testing.T, n int) []*Server {
	t.Helper()
	var dirs []string
	for range n {
		dirs = append(dirs, t.TempDir())
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nodes, err := StartCluster(ClusterConfig{Name: "test", Dirs: dirs, Timeout: 30 * time.Second}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range nodes {
			s.Shutdown()
		}
	})
	return nodes
}

// A three-node cluster runs a replicated stream that keeps taking writes
// with one node gone.
func TestClusterReplicatesStreams(t *testing.T) {
	nodes := startCluster(t, 3)
	if nodes[0].RouteURL() == "" {
		t.Fatal("no route URL")
	}
	nc, err := nats.Connect(nodes[0].ClientURL() + "," + nodes[1].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st jetstream.Stream
	testkit.Poll(30*time.Second, func() bool { // the meta leader may need a moment after the nodes are current
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "r3", Subjects: []string{"r3"}, Storage: jetstream.FileStorage, Replicas: 3})
		return err == nil || ctx.Err() != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream info %+v, %v: want 3 replicas", info, err)
	}
	if _, err := js.Publish(ctx, "r3", []byte("one")); err != nil {
		t.Fatal(err)
	}
	nodes[2].Shutdown() // one node of three gone: a quorum is left
	testkit.Poll(30*time.Second, func() bool {
		_, err = js.Publish(ctx, "r3", []byte("two"))
		return err == nil || ctx.Err() != nil
	})
	if err != nil {
		t.Fatalf("publish with one node of three down: %v", err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream state %+v, %v: want 2 messages", info.State, err)
	}
}

// TestRestartAfterAFullDisk: a stream whose disk filled refuses every
// write, even once there is room again (the file store keeps its write
// error); the server's log tells StoreFailed, and Restart opens the store
// again: the connection made before follows the new server by itself,
// writes work, nothing stored before is lost.
func TestRestartAfterAFullDisk(t *testing.T) {
	dir := smallfs.Temp(t, 8<<20)
	s, js := startJS(t, "full", dir)
	ctx := testkit.Context(t, time.Minute)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, MaxBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 4000)
	publish := func() error {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := js.Publish(pctx, "s.a", payload)
		return err
	}
	for i := range 10 {
		if err := publish(); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if failed, _ := s.StoreFailed(); failed {
		t.Fatal("StoreFailed before the disk filled")
	}
	if _, err := smallfs.Fill(dir, "filler", 0); err != nil {
		t.Fatal(err)
	}
	if err := publish(); err == nil {
		t.Fatal("a publish on a full disk was acknowledged")
	}
	testkit.WaitFor(t, 5*time.Second, "the write error logged", func() bool { failed, _ := s.StoreFailed(); return failed })
	os.Remove(dir + "/filler")
	if err := publish(); err == nil {
		t.Fatal("a publish after the space came back was acknowledged without a restart: the sticky error is gone, and Restart may be needless")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if failed, last := s.StoreFailed(); failed {
		t.Errorf("StoreFailed after the restart: %s", last)
	}
	testkit.WaitFor(t, 10*time.Second, "a publish on the connection made before the restart", func() bool { return publish() == nil })
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < 11 {
		t.Errorf("the stream holds %d messages after the restart, want the 10 from before and 1 after", info.State.Msgs)
	}
}

// A server started (or started again) on a nearly full disk takes writes
// up to the filesystem once room comes back: its store is not capped at
// what was free at its start.
func TestStartOnANearlyFullDiskTakesTheRoomThatComesBack(t *testing.T) {
	dir := smallfs.Temp(t, 16<<20)
	if _, err := smallfs.Fill(dir, "filler", 1<<20); err != nil { // 1 MiB left
		t.Fatal(err)
	}
	_, js := startJS(t, "nearly-full", dir)
	ctx := testkit.Context(t, time.Minute)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	os.Remove(dir + "/filler")
	payload := make([]byte, 64<<10)
	for i := range 64 { // 4 MiB: four times what was free at the start
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.Publish(pctx, "s.a", payload)
		cancel()
		if err != nil {
			t.Fatalf("publish %d (%d KiB in all): %v", i, (i+1)*64, err)
		}
	}
}

// startJS starts a server without a listener on dir and connects to it in
// process; both end with the test. (celltest.Connect imports this
// package.)
func startJS(t *testing.T, name, dir string) (*Server, jetstream.JetStream) {
	t.Helper()
	s, err := Start(Config{Name: name, StoreDir: dir, Port: -1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}
