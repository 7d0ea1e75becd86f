package operator

import (
	"encoding/json"
	"testing"

	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

// TestAnOlderCellSpecIsDefaultedFieldByField: a Cell written before some
// of its fields existed (no settings ConfigMap, no secrets block, no
// anti-affinity) gets each one's default, as the API server gives it,
// and the fields it has keep their values.
func TestAnOlderCellSpecIsDefaultedFieldByField(t *testing.T) {
	var c v1alpha1.Cell
	old := `{"apiVersion":"cellkit.io/v1alpha1","kind":"Cell","metadata":{"name":"c1"},"spec":{"image":"cellkit/cell:1","instances":5,"weight":2}}`
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	c.Default()
	s := c.Spec
	if s.Image != "cellkit/cell:1" || s.Instances != 5 || s.Weight != 2 {
		t.Errorf("the spec's own fields changed: image %q, instances %d, weight %d", s.Image, s.Instances, s.Weight)
	}
	if s.Settings != "cellkit-settings" || s.Secrets.TLS != "cellkit-cell-tls" || s.Secrets.NATS != "cellkit-nats" ||
		s.AntiAffinity != v1alpha1.AntiAffinityRequired || s.Storage == nil || s.NATSImage == "" {
		t.Errorf("the missing fields not defaulted: %+v", s)
	}
}
