package operator

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cellkit/cellkit/internal/operator/api/v1alpha1"
)

// ManagerConfig is how the operator's manager runs.
type ManagerConfig struct {
	// Namespace is the one namespace whose cells it reconciles ("": all).
	Namespace string
	// LeaderElection makes one operator of several reconcile at a time,
	// by a Lease named LeaderElectionID in LeaderNamespace.
	LeaderElection  bool
	LeaderNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election
	// [15s, 10s, 2s: controller-runtime's].
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// LeaderElectionID is the Lease the operators elect their leader by.
const LeaderElectionID = "cellkit-operator"

// Scheme is the operator's: Kubernetes' types and the Cell.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager is a controller-runtime manager for the cluster at rc; the
// Reconciler is registered with it by SetupWithManager. Its own metrics
// and probe servers are off: the program serves its registries and probes
// on its admin listener.
func NewManager(rc *rest.Config, cfg ManagerConfig) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       cfg.LeaderNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Several managers in one process (the tests) register the same
		// controller.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if cfg.LeaseDuration > 0 {
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &cfg.LeaseDuration, &cfg.RenewDeadline, &cfg.RetryPeriod
	}
	if cfg.Namespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{cfg.Namespace: {}}}
	}
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	return mgr, nil
}
