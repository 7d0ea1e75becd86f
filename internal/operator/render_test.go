package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

// A cell's instances keep to nodes of their own as its spec says, and its
// JetStream nodes get the spec's resources with a GOMEMLIMIT of their
// limit's (the base's defaults are held by deploy/release's
// TestTheOperatorRendersTheBase).
func TestPlacementAndTheNATSNodesResources(t *testing.T) {
	render := func(edit func(*v1alpha1.Cell)) corev1.PodSpec {
		c := &v1alpha1.Cell{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "cellkit"}, Spec: v1alpha1.CellSpec{Image: "cellkit/cell:1"}}
		edit(c)
		c.Default()
		return Render(c, control.Command{Image: c.Spec.Image}, NATSConfigName()).StatefulSet.Spec.Template.Spec
	}
	natsEnv := func(p corev1.PodSpec, name string) string {
		for _, e := range p.InitContainers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}

	def := render(func(*v1alpha1.Cell) {})
	if a := def.Affinity.PodAntiAffinity; len(a.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(a.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("default anti-affinity: %+v, want one required term", a)
	}
	if got := natsEnv(def, "GOMEMLIMIT"); got != "920MiB" {
		t.Errorf("default NATS GOMEMLIMIT %q, want 920MiB", got)
	}

	small := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	lab := render(func(c *v1alpha1.Cell) {
		c.Spec.AntiAffinity = v1alpha1.AntiAffinityPreferred
		c.Spec.NATSResources = &small
	})
	a := lab.Affinity.PodAntiAffinity
	if len(a.RequiredDuringSchedulingIgnoredDuringExecution) != 0 || len(a.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("Preferred anti-affinity: %+v, want one preferred term", a)
	}
	term := a.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector.MatchLabels[LabelCell] != "c1" {
		t.Errorf("preferred term %+v, want the cell's pods by hostname", term)
	}
	if got := lab.InitContainers[0].Resources; !got.Requests.Cpu().Equal(resource.MustParse("50m")) || !got.Limits.Memory().Equal(resource.MustParse("256Mi")) {
		t.Errorf("NATS resources %+v, want the spec's", got)
	}
	if got := natsEnv(lab, "GOMEMLIMIT"); got != "224MiB" {
		t.Errorf("NATS GOMEMLIMIT %q, want 224MiB (90 %% of 256Mi, by 8 MiB)", got)
	}
	if got := lab.Containers[0].Resources.Requests.Cpu(); !got.Equal(resource.MustParse("500m")) {
		t.Errorf("the cell container's request %v changed with the NATS node's", got)
	}
}
