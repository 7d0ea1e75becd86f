package kubenode

import (
	"slices"
	"testing"
)

func TestSplitRule(t *testing.T) {
	line := `POSTROUTING -s 10.244.0.7/32 -m comment --comment "name: \"cellkit\" id: \"4f2a\"" -j CNI-8c1d2e3f4a5b6c7d8e9f0a1b`
	got, err := splitRule(line)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"POSTROUTING", "-s", "10.244.0.7/32", "-m", "comment", "--comment", `name: "cellkit" id: "4f2a"`, "-j", "CNI-8c1d2e3f4a5b6c7d8e9f0a1b"}
	if !slices.Equal(got, want) {
		t.Errorf("splitRule:\n got %q\nwant %q", got, want)
	}
	if _, err := splitRule(`X -m comment --comment "open`); err == nil {
		t.Error("an unterminated quote was taken")
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		"/run/cellkit-cluster/containerd/netns/cni-1": "/run/cellkit-cluster/containerd/netns/cni-1",
		`/var/lib/a\040b`: "/var/lib/a b",
		`/x\134y`:         `/x\y`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTheCNICommentIsWhatIptablesSaveShows(t *testing.T) {
	// iptables-save escapes the quotes of the bridge plugin's comment.
	line := `-A POSTROUTING -s 10.244.0.7/32 -m comment --comment "name: \"cellkit\" id: \"4f2a\"" -j CNI-8c1d`
	if !containsComment(line) {
		t.Errorf("%q not matched by %q", line, cniComment)
	}
	if containsComment(`-A POSTROUTING -m comment --comment "name: \"cellkit2\" id: \"1\"" -j CNI-1`) {
		t.Error("another network's rule matched")
	}
}

func TestTheClustersRulesAreFound(t *testing.T) {
	save := `*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-8c1d - [0:0]
:CNI-9999 - [0:0]
:KUBE-SERVICES - [0:0]
:DOCKER - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -s 10.244.0.7/32 -m comment --comment "name: \"cellkit\" id: \"4f2a\"" -j CNI-8c1d
-A POSTROUTING -s 10.9.0.7/32 -m comment --comment "name: \"other\" id: \"1\"" -j CNI-9999
-A POSTROUTING -s 172.17.0.0/16 -j MASQUERADE
-A CNI-8c1d -d 10.244.0.0/24 -m comment --comment "name: \"cellkit\" id: \"4f2a\"" -j ACCEPT
-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-NPX46M4PTMTKRN6Y
COMMIT
*filter
:INPUT ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
`
	rs, err := parseRules("iptables", save)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"KUBE-SERVICES", "CNI-8c1d"}; !slices.Equal(rs.chains["nat"], want) {
		t.Errorf("nat chains %v, want %v", rs.chains["nat"], want)
	}
	if want := []string{"KUBE-KUBELET-CANARY"}; !slices.Equal(rs.chains["filter"], want) {
		t.Errorf("filter chains %v, want %v", rs.chains["filter"], want)
	}
	// Only the built-in chains' rules are deleted one by one; another
	// network's and Docker's stay.
	var got []string
	for _, r := range rs.rules["nat"] {
		got = append(got, r[0]+" -> "+target(r))
	}
	if want := []string{"PREROUTING -> KUBE-SERVICES", "POSTROUTING -> CNI-8c1d"}; !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	// Shown: KUBE- declarations and every line of ours (a CNI chain by
	// its rules).
	if len(rs.lines) != 6 {
		t.Errorf("%d lines shown, want 6: %q", len(rs.lines), rs.lines)
	}
}
