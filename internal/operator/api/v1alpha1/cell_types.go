package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cell is one cell of cellkit: its instances (a StatefulSet, each pod a
// cell instance beside its node of the cell's own JetStream cluster),
// their Services, disruption budget and network policy, and its place in
// the cell map. The object's name is the cell's id in the map.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cellkit
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Release",type=string,JSONPath=`.status.release`
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Slots",type=integer,JSONPath=`.status.slots`
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queueDepth`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 32 && self.metadata.name.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$')",message="metadata.name is the cell's id in the map: 1-32 of [a-z0-9-], starting and ending with a letter or digit"
type Cell struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CellSpec   `json:"spec"`
	Status CellStatus `json:"status,omitempty"`
}

// CellSpec is the cell an operator asks for.
type CellSpec struct {
	// Image is the cell program's image. A change to it, or to set, is a
	// release: it goes out cell by cell, one instance at a time, with the
	// release's gates.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// Set are the cell's settings: flags set on top of the operator's,
	// each "name=value" (given as --name=value after them, so a flag given
	// once takes this value).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-z0-9-]*=`
	// +kubebuilder:validation:items:MaxLength=1024
	Set []string `json:"set,omitempty"`

	// NATSImage is the image of the cell's JetStream nodes, the official
	// nats image at the nats-server version the cells are built with.
	// +optional
	// +kubebuilder:default="nats:2.15.3"
	// +kubebuilder:validation:MaxLength=512
	NATSImage string `json:"natsImage,omitempty"`

	// Instances is how many instances (pods) the cell runs, each with a
	// node of the cell's JetStream cluster: 1, 3 or 5. A cell grows; it is
	// not shrunk (its JetStream cluster would keep the removed nodes as
	// peers): make a smaller cell and remove this one.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Enum=1;3;5
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="instances cannot shrink: a cell's JetStream cluster keeps its nodes as peers; make a smaller cell and remove this one"
	Instances int32 `json:"instances,omitempty"`

	// Weight is the cell's relative share of the slots (users) and of the
	// agencies' sessions.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Weight int32 `json:"weight,omitempty"`

	// Capacity is the request rate (per second) the cell is declared to
	// take; plans flag a cell projected over it. 0 declares none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000000
	Capacity int32 `json:"capacity,omitempty"`

	// Drained moves the cell's slots to the other cells and, once its
	// queue is empty, hands its agencies' sessions to them; false takes
	// them back.
	// +optional
	Drained bool `json:"drained,omitempty"`

	// Agencies fixes the cell's share of agencies' sessions; an agency not
	// named gets the share its weight gives.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Agencies []AgencyShare `json:"agencies,omitempty"`

	// Resources are the cell container's (default: requests cpu 500m,
	// memory 512Mi; limit memory 1Gi, GOMEMLIMIT 90 % of it).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// NATSResources are the JetStream node's (default: requests cpu 250m,
	// memory 256Mi; limit memory 1Gi).
	// +optional
	NATSResources *corev1.ResourceRequirements `json:"natsResources,omitempty"`

	// AntiAffinity says how strictly the cell's instances keep to nodes
	// of their own: Required (never two on one node: losing a node costs
	// the cell one instance and its JetStream cluster one node) or
	// Preferred (apart where nodes allow, together where they do not: a
	// cluster of fewer nodes than instances, a lab of one node, where
	// losing that node loses the cell).
	// +optional
	// +kubebuilder:default=Required
	// +kubebuilder:validation:Enum=Required;Preferred
	AntiAffinity AntiAffinity `json:"antiAffinity,omitempty"`

	// Storage is each instance's volume, for its JetStream node and store.
	// +optional
	// +kubebuilder:default="20Gi"
	Storage *resource.Quantity `json:"storage,omitempty"`

	// StorageClassName is the volumes' class (default: the cluster's).
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Secrets names what the cell mounts, by reference.
	// +optional
	// +kubebuilder:default={}
	Secrets CellSecrets `json:"secrets,omitempty"`

	// Settings is the ConfigMap whose keys registry and agencies every
	// process reads.
	// +optional
	// +kubebuilder:default="cellkit-settings"
	// +kubebuilder:validation:MaxLength=253
	Settings string `json:"settings,omitempty"`
}

// AntiAffinity is how strictly a cell's instances keep to nodes of their
// own.
type AntiAffinity string

// The anti-affinities.
const (
	AntiAffinityRequired  AntiAffinity = "Required"
	AntiAffinityPreferred AntiAffinity = "Preferred"
)

// AgencyShare is a cell's fixed share of one agency's sessions.
type AgencyShare struct {
	// Name is the agency's: 1-32 of [a-z0-9_], starting with a letter.
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,31}$`
	Name string `json:"name"`
	// Sessions is how many sessions the cell may hold, at most the
	// agency's limit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Sessions int32 `json:"sessions"`
}

// CellSecrets names the Secrets a cell mounts.
type CellSecrets struct {
	// TLS holds ca.crt, tls.crt and tls.key: the instances' certificate
	// (role cell) and the CA clients are checked against.
	// +optional
	// +kubebuilder:default="cellkit-cell-tls"
	TLS string `json:"tls,omitempty"`
	// AdminToken holds tokens: the admin API's bearer tokens.
	// +optional
	// +kubebuilder:default="cellkit-admin-token"
	AdminToken string `json:"adminToken,omitempty"`
	// NATS holds token and route-password for the cell's JetStream nodes.
	// +optional
	// +kubebuilder:default="cellkit-nats"
	NATS string `json:"nats,omitempty"`
	// Consul holds token: the registry's ACL token.
	// +optional
	// +kubebuilder:default="cellkit-consul"
	Consul string `json:"consul,omitempty"`
}

// Phase is where a cell is in its life.
type Phase string

// The phases, in the order a cell goes through them.
const (
	// PhasePending: its objects are made; not all its instances are ready.
	PhasePending Phase = "Pending"
	// PhaseServing: ready and in the map, active.
	PhaseServing Phase = "Serving"
	// PhaseReleasing: a release is replacing its instances.
	PhaseReleasing Phase = "Releasing"
	// PhaseDraining: its slots moved away; its queue is emptying.
	PhaseDraining Phase = "Draining"
	// PhaseDrained: drained (spec.drained), kept.
	PhaseDrained Phase = "Drained"
	// PhaseDeleting: being deleted: drained, then out of the map, then
	// its objects go.
	PhaseDeleting Phase = "Deleting"
)

// CellStatus is the cell as the operator last saw it.
type CellStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Ready is "ready/instances", for people.
	// +optional
	Ready string `json:"ready,omitempty"`
	// ReadyInstances counts the instances ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`
	// Release is what its instances say they run (several: comma-separated).
	// +optional
	Release string `json:"release,omitempty"`
	// Image is the image its instances run (the StatefulSet's current
	// revision).
	// +optional
	Image string `json:"image,omitempty"`
	// Slots is how many slots the map gives it.
	// +optional
	Slots int32 `json:"slots,omitempty"`
	// QueueDepth is its queue's depth, as its instances last said.
	// +optional
	QueueDepth int64 `json:"queueDepth,omitempty"`
	// MapVersion is the map version last read.
	// +optional
	MapVersion int64 `json:"mapVersion,omitempty"`
	// Conditions: Ready (instances ready), InMap (the map holds it as the
	// spec says), Released (it runs the spec's release), Drained.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// CellList is a list of cells.
type CellList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cell `json:"items"`
}

// The conditions of a Cell.
const (
	// ConditionReady: every instance is ready.
	ConditionReady = "Ready"
	// ConditionInMap: the map holds the cell as its spec says (weight,
	// capacity, shares, state); False with the reason a plan refused, or
	// the registry's error.
	ConditionInMap = "InMap"
	// ConditionReleased: its instances run the spec's release.
	ConditionReleased = "Released"
	// ConditionDrained: its queue is empty and it holds no sessions
	// (spec.drained, or on its way out); False says what it waits for.
	ConditionDrained = "Drained"
)

// Default fills what c leaves empty as the API server's defaults do
// (the markers above; a test holds the two together), for a Cell read
// from a file rather than from the API server.
func (c *Cell) Default() {
	s := &c.Spec
	if s.NATSImage == "" {
		s.NATSImage = "nats:2.15.3"
	}
	if s.Instances == 0 {
		s.Instances = 3
	}
	if s.Weight == 0 {
		s.Weight = 1
	}
	if s.AntiAffinity == "" {
		s.AntiAffinity = AntiAffinityRequired
	}
	if s.Storage == nil {
		q := resource.MustParse("20Gi")
		s.Storage = &q
	}
	for _, d := range []struct {
		p *string
		v string
	}{
		{&s.Secrets.TLS, "cellkit-cell-tls"}, {&s.Secrets.AdminToken, "cellkit-admin-token"},
		{&s.Secrets.NATS, "cellkit-nats"}, {&s.Secrets.Consul, "cellkit-consul"}, {&s.Settings, "cellkit-settings"},
	} {
		if *d.p == "" {
			*d.p = d.v
		}
	}
}
