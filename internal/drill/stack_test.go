package drill

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellkit/cellkit/internal/loadtest"
)

// TestRunAgainstStack sends 3 s of load through a real local stack started
// with the binaries of ./bin (make build), and checks every 202 is verified.
func TestRunAgainstStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the local stack")
	}
	bin, _ := filepath.Abs("../../bin")
	for _, b := range []string{"cellctl", "cell", "router", "agencysim"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("no %s in %s: run make build", b, bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	st, err := StartStack(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	r, err := loadtest.NewRunner(loadtest.Config{Target: st.Router, Key: st.APIKey, Steps: []loadtest.Step{{Rate: 50, For: 3 * time.Second}}, Users: 50, KeepSamples: true}, loadtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status["202"] != 150 {
		t.Fatalf("status = %v, want 150 × 202", res.Status)
	}
	if len(res.CellNames()) < 2 {
		t.Errorf("cells = %v, want the load spread over the cells", res.CellNames())
	}
	v := r.Verify(ctx, res.Samples, 30*time.Second, 20)
	if v.Done+v.Failed != 150 || v.Lost+v.Unfinished+v.Changed+v.ReplayNewID != 0 {
		t.Errorf("verify = %+v", v)
	}
}
