package natsembed

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPersistsAcrossRestartsAndListensOnLoopback(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	srv, err := Start(Config{Name: "t", StoreDir: dir}, log)
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

	srv, err = Start(Config{Name: "t", StoreDir: dir, Port: -1}, log)
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
	log := slog.New(slog.DiscardHandler)
	if _, err := Start(Config{Name: "t", StoreDir: t.TempDir(), Host: "0.0.0.0"}, log); err == nil {
		t.Error("started on 0.0.0.0")
	}
	if _, err := Start(Config{Name: "t"}, log); err == nil {
		t.Error("started without a store dir")
	}
}
