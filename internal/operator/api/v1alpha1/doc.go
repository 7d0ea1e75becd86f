// Package v1alpha1 is the cellkit.io/v1alpha1 API: the Cell resource the
// operator (internal/operator) reconciles into a cell's Kubernetes objects
// and its place in the cell map. The CRD in deploy/kubernetes/operator/crd
// is generated from these types by controller-gen (`make generate`), with
// the validation, defaults and printer columns their markers say.
//
// +kubebuilder:object:generate=true
// +groupName=cellkit.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "cellkit.io", Version: "v1alpha1"}

// AddToScheme adds the API's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Cell{}, &CellList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
