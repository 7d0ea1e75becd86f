package consultest_test

import (
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/cellkit/cellkit/internal/consultest"
)

func TestConsulAgentStopRestart(t *testing.T) {
	agent := consultest.Start(t)
	kv := agent.Client(t).KV()

	if _, err := kv.Put(&api.KVPair{Key: "consultest/k", Value: []byte("v1")}, nil); err != nil {
		t.Fatalf("Put: %v", err)
	}
	pair, _, err := kv.Get("consultest/k", nil)
	if err != nil || pair == nil || string(pair.Value) != "v1" {
		t.Fatalf("Get = %v, %v, want v1", pair, err)
	}

	agent.Stop(t)
	if _, _, err := kv.Get("consultest/k", nil); err == nil {
		t.Fatalf("Get after Stop succeeded, want an error")
	}
	agent.Stop(t) // idempotent

	agent.Restart(t)
	pair, _, err = kv.Get("consultest/k", nil)
	if err != nil {
		t.Fatalf("Get after Restart: %v", err)
	}
	if pair != nil {
		t.Errorf("Get after Restart = %q, want no key (a dev agent keeps data in memory)", pair.Value)
	}
	// Sessions need the node registered: Restart waits for that too.
	if _, _, err := agent.Client(t).Session().Create(&api.SessionEntry{TTL: "10s"}, nil); err != nil {
		t.Fatalf("Session.Create after Restart: %v", err)
	}
}

func TestConsulTwoAgents(t *testing.T) {
	a, b := consultest.Start(t), consultest.Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two agents share address %s", a.Addr())
	}
}

func TestConsulACL(t *testing.T) {
	agent := consultest.Start(t, consultest.WithACL("c0ffee00-0000-4000-8000-000000000001"))
	if _, err := agent.Client(t).KV().Put(&api.KVPair{Key: "consultest/acl", Value: []byte("x")}, nil); err != nil {
		t.Fatalf("Put with management token: %v", err)
	}
	cfg := api.DefaultConfig()
	cfg.Address = agent.Addr()
	cfg.Token = "anonymous-nobody"
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: "consultest/acl", Value: []byte("y")}, nil); err == nil {
		t.Fatalf("Put with unknown token succeeded, want ACL error")
	}
}
