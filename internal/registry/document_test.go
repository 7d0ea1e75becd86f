package registry

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/consultest"
	"github.com/cellkit/cellkit/internal/testkit"
)

// TestDocument: a document beside the map, in a file registry and in
// Consul, is written only over the revision read (created only where
// there is none), and deleted the same way.
func TestDocument(t *testing.T) {
	agent := consultest.Start(t)
	for name, url := range map[string]string{
		"file":   "file:" + filepath.Join(t.TempDir(), "map.json"),
		"consul": "consul://" + agent.Addr() + "/documents",
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testkit.Context(t, time.Minute)
			reg, err := Open(Config{URL: url, Token: agent.Token()}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reg.Close() })
			d := DocumentFor(reg, "rollout")
			if d == nil {
				t.Fatal("no document beside", reg.Describe())
			}
			if _, _, err := d.Get(ctx); !errors.Is(err, ErrNoDocument) {
				t.Fatalf("Get before any Put: %v, want ErrNoDocument", err)
			}
			if err := d.Put(ctx, []byte(`{"a":1}`), 0); err != nil {
				t.Fatal(err)
			}
			data, rev1, err := d.Get(ctx)
			if err != nil || string(data) != `{"a":1}` || rev1 == 0 {
				t.Fatalf("Get = %s, %d, %v", data, rev1, err)
			}
			if err := d.Put(ctx, []byte(`{"a":2}`), 0); !errors.Is(err, ErrDocumentChanged) {
				t.Errorf("a second create: %v, want ErrDocumentChanged", err)
			}
			if err := d.Put(ctx, []byte(`{"a":2}`), rev1); err != nil {
				t.Fatal(err)
			}
			data, rev2, err := d.Get(ctx)
			if err != nil || string(data) != `{"a":2}` || rev2 == rev1 {
				t.Fatalf("Get after the update = %s, %d, %v (revision before %d)", data, rev2, err, rev1)
			}
			if err := d.Put(ctx, []byte(`{"a":3}`), rev1); !errors.Is(err, ErrDocumentChanged) {
				t.Errorf("a write over an old revision: %v, want ErrDocumentChanged", err)
			}
			if err := d.Delete(ctx, rev1); !errors.Is(err, ErrDocumentChanged) {
				t.Errorf("a delete of an old revision: %v, want ErrDocumentChanged", err)
			}
			if err := d.Delete(ctx, rev2); err != nil {
				t.Fatal(err)
			}
			if _, _, err := d.Get(ctx); !errors.Is(err, ErrNoDocument) {
				t.Errorf("Get after Delete: %v, want ErrNoDocument", err)
			}
		})
	}
}
