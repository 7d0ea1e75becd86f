package cellctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cellkit/cellkit/internal/api"
	"github.com/cellkit/cellkit/internal/atomicfile"
	"github.com/cellkit/cellkit/internal/control"
	"github.com/cellkit/cellkit/internal/release"
)

// A release to Kubernetes (deploy/kubernetes): cellctl cannot replace the
// processes there, so 'rollout plan --kustomize DIR' writes what to apply
// wave by wave instead, one kustomize Component per wave, and the gates
// run beside kubectl ('rollout gate'; docs/kubernetes.md, "Upgrade").

// The objects of deploy/kubernetes the components patch: a cell is the
// StatefulSet cellkit-cell-CELL (the base's name and the overlay's name
// suffix), the routers are one Deployment.
const (
	cellWorkload    = "cellkit-cell-"
	cellContainer   = "cell"
	routerWorkload  = "cellkit-router"
	routerContainer = "router"
)

// The layout of a components directory: dir/wave-N/kustomization.yaml,
// each file starting with kustomizeMark, by which writeKustomize knows the
// files it wrote from any others.
const (
	waveDirPrefix = "wave-"
	kustomizeFile = "kustomization.yaml"
	kustomizeMark = "# Written by 'cellctl rollout plan --kustomize'"
)

// writeKustomize writes into dir one kustomize Component per wave of
// cells, dir/wave-N/kustomization.yaml: it sets the container "cell" of
// the StatefulSet of every cell of waves 1 to N to cellImage, so that each
// wave's component keeps the waves before it on the new release. With
// routerImage, one more wave sets the container "router" of the routers'
// Deployment to it, the cells' patches kept. The waves of routers in waves
// are a local stack's processes and are left out: on Kubernetes the
// routers are one Deployment, rolled in that last wave.
//
// dir must be new, empty, or hold only the wave directories an earlier
// call wrote: those beyond the new waves are removed. It returns the
// paths written, in wave order.
func writeKustomize(dir, cellImage, routerImage string, waves []control.Wave) ([]string, error) {
	if dir == "" {
		return nil, errors.New("no directory to write the components into")
	}
	if err := checkImage("--image", cellImage, "cell"); err != nil {
		return nil, err
	}
	if routerImage != "" {
		if err := checkImage("--router-image", routerImage, "router"); err != nil {
			return nil, err
		}
	}
	var cells []control.Wave
	seen := map[string]bool{}
	for _, w := range waves {
		if len(w.Routers) > 0 || len(w.Cells) == 0 {
			continue
		}
		for _, c := range w.Cells {
			switch {
			case !api.ValidCellID(c):
				return nil, fmt.Errorf("cell %q: not a cell id", c)
			case seen[c]:
				return nil, fmt.Errorf("cell %s is in two waves", c)
			}
			seen[c] = true
		}
		cells = append(cells, w)
	}
	if len(cells) == 0 {
		return nil, errors.New("no wave of cells to write")
	}
	old, err := ownWaves(dir)
	if err != nil {
		return nil, err
	}

	total := len(cells)
	if routerImage != "" {
		total++
	}
	files := make([][]byte, 0, total)
	var done []string
	for i, w := range cells {
		files = append(files, cellWave(dir, i+1, total, w, done, cellImage))
		done = append(done, w.Cells...)
	}
	if routerImage != "" {
		files = append(files, routerWave(dir, total, done, cellImage, routerImage))
	}

	var paths []string
	for i, data := range files {
		wd := filepath.Join(dir, waveDirPrefix+strconv.Itoa(i+1))
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return paths, err
		}
		path := filepath.Join(wd, kustomizeFile)
		if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	for _, n := range old {
		if n <= total {
			continue
		}
		wd := filepath.Join(dir, waveDirPrefix+strconv.Itoa(n))
		// The file, then the directory: os.Remove refuses a directory
		// that something else has been put in since ownWaves looked.
		if err := os.Remove(filepath.Join(wd, kustomizeFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return paths, err
		}
		if err := os.Remove(wd); err != nil {
			return paths, fmt.Errorf("remove the stale wave %s: %w", wd, err)
		}
	}
	return paths, nil
}

// ownWaves are the numbers of the wave directories in dir, which holds
// nothing else: each a wave-N holding at most a kustomization.yaml that
// writeKustomize wrote. A dir that does not exist holds none.
func ownWaves(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var waves []int
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), waveDirPrefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), waveDirPrefix) || err != nil || n < 1 || e.Name() != waveDirPrefix+strconv.Itoa(n) {
			return nil, notOurs(dir, path)
		}
		inside, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, f := range inside {
			if f.Name() != kustomizeFile || !f.Type().IsRegular() {
				return nil, notOurs(dir, filepath.Join(path, f.Name()))
			}
			data, err := os.ReadFile(filepath.Join(path, f.Name()))
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(string(data), kustomizeMark) {
				return nil, notOurs(dir, filepath.Join(path, f.Name()))
			}
		}
		waves = append(waves, n)
	}
	return waves, nil
}

func notOurs(dir, path string) error {
	if rel, err := filepath.Rel(dir, path); err == nil {
		path = rel
	}
	return fmt.Errorf("%s holds %s, which cellctl did not write: give a new directory, or one that holds only its wave-N components", dir, path)
}

// checkImage refuses an image reference the component cannot carry as it
// is: empty, with spaces or other bytes no reference has, without a tag or
// digest (it would run whatever :latest is when a pod starts), or named as
// in the base (cellkit/cell, cellkit/router), which the overlay's images:
// entry rewrites, tag included, after the components are applied; and
// any that is no image reference (release.ValidImage).
func checkImage(flag, ref, program string) error {
	example := "registry.example.com/cellkit/" + program + ":1.5.0"
	if ref == "" {
		return fmt.Errorf("%s is required: the %ss' new image, like %s", flag, program, example)
	}
	if strings.ContainsFunc(ref, unicode.IsSpace) {
		return fmt.Errorf("%s %q: an image reference has no spaces", flag, ref)
	}
	for _, c := range ref {
		if !(c < utf8.RuneSelf && isAlnum(byte(c)) || strings.ContainsRune("._-/:@", c)) {
			return fmt.Errorf("%s %q: %q is not in an image reference (want one like %s)", flag, ref, c, example)
		}
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i+1:]
	}
	alg, hex, _ := strings.Cut(digest, ":")
	switch {
	case name == "" || !isAlnum(name[0]) || !isAlnum(name[len(name)-1]):
		return fmt.Errorf("%s %q: not an image reference (want one like %s)", flag, ref, example)
	case hasDigest && (alg == "" || hex == "" || strings.ContainsAny(hex, ":@")):
		return fmt.Errorf("%s %q: a digest is ALGORITHM:HEX, like @sha256:…", flag, ref)
	case tag == "" && !hasDigest:
		return fmt.Errorf("%s %q: no tag or digest, so each pod would run whatever :latest is when it starts (want one like %s)", flag, ref, example)
	case name == "cellkit/cell" || name == "cellkit/router":
		return fmt.Errorf("%s %q: the overlay's images: entry for %s rewrites this name and its tag; give the name the cluster pulls, like %s", flag, ref, name, example)
	}
	if err := release.ValidImage(ref); err != nil { // the whole grammar, as a rollout's image is checked
		return fmt.Errorf("%s: %w", flag, err)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// cellWave is wave n of total: the cells of w move to image, those of
// the waves before (done) stay on it.
func cellWave(dir string, n, total int, w control.Wave, done []string, image string) []byte {
	var b strings.Builder
	cells := strings.Join(w.Cells, ",")
	fmt.Fprintf(&b, "%s: wave %d of %d.\n#\n", kustomizeMark, n, total)
	fmt.Fprintf(&b, "# Moves cell%s %s to\n#   %s\n", plural(len(w.Cells)), cells, image)
	if len(done) > 0 {
		fmt.Fprintf(&b, "# and keeps %s (the waves before) on it.\n", strings.Join(done, ","))
	}
	b.WriteString("# To roll it out:\n")
	fmt.Fprintf(&b, "#   1. Check that every instance of %s is ready (cellctl status): a\n", cells)
	b.WriteString("#      StatefulSet's rolling update does not ask the disruption budget.\n")
	writeApply(&b, dir, n, 2)
	fmt.Fprintf(&b, "#   3. for c in %s; do kubectl -n NAMESPACE rollout status statefulset/%s$c; done\n", strings.Join(w.Cells, " "), cellWorkload)
	gate := "cellctl rollout gate --cells " + cells
	if w.Bake > 0 {
		gate += " --bake " + shortDuration(w.Bake)
	}
	fmt.Fprintf(&b, "#   4. %s\n", gate)
	if n < total {
		fmt.Fprintf(&b, "#      Exit 0: go on with %s%d.\n", waveDirPrefix, n+1)
	} else {
		b.WriteString("#      Exit 0: the release is out (below).\n")
	}
	fmt.Fprintf(&b, "#      Exit 1: %s\n", back(n))
	if n == total {
		writeDone(&b)
	}
	b.WriteString(componentHead)
	for _, c := range slices.Concat(done, w.Cells) {
		writePatch(&b, "StatefulSet", cellWorkload+c, cellContainer, image)
	}
	return []byte(b.String())
}

// routerWave is the last wave, n: the routers' Deployment moves to
// routerImage, every cell (cells) stays on cellImage.
func routerWave(dir string, n int, cells []string, cellImage, routerImage string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: wave %d of %d, the routers.\n#\n", kustomizeMark, n, n)
	fmt.Fprintf(&b, "# Moves the routers (Deployment %s) to\n#   %s\n", routerWorkload, routerImage)
	fmt.Fprintf(&b, "# and keeps every cell (%s) on\n#   %s\n", strings.Join(cells, ","), cellImage)
	b.WriteString("# The Deployment replaces its pods one at a time, a surge pod first.\n")
	b.WriteString("# To roll it out:\n")
	writeApply(&b, dir, n, 1)
	fmt.Fprintf(&b, "#   2. kubectl -n NAMESPACE rollout status deployment/%s\n", routerWorkload)
	fmt.Fprintf(&b, "#      To go back, %s\n", back(n))
	writeDone(&b)
	b.WriteString(componentHead)
	for _, c := range cells {
		writePatch(&b, "StatefulSet", cellWorkload+c, cellContainer, cellImage)
	}
	writePatch(&b, "Deployment", routerWorkload, routerContainer, routerImage)
	return []byte(b.String())
}

// writeApply writes the step of wave n that puts its component into the
// overlay, in place of the wave before's, and applies it.
func writeApply(b *strings.Builder, dir string, n, step int) {
	where := waveDirPrefix + strconv.Itoa(n)
	if abs, err := filepath.Abs(dir); err == nil {
		where = filepath.Base(abs) + "/" + where
	}
	fmt.Fprintf(b, "#   %d. In the overlay's kustomization.yaml, list this directory under\n", step)
	b.WriteString("#      components:")
	if n > 1 {
		fmt.Fprintf(b, " in place of %s%d", waveDirPrefix, n-1)
	}
	fmt.Fprintf(b, " (- %s from the overlay's\n", where)
	b.WriteString("#      directory when it is in there), then kubectl apply -k OVERLAY.\n")
}

// back says how wave n goes back: the wave before in its place.
func back(n int) string {
	if n == 1 {
		return "take this component out of the overlay and apply again."
	}
	return fmt.Sprintf("put %s%d in this one's place and apply again.", waveDirPrefix, n-1)
}

// writeDone says how a release ends after its last wave.
func writeDone(b *strings.Builder) {
	b.WriteString("#\n# Once it is out: name the images this component sets in the overlay's\n")
	b.WriteString("# images: (kustomize edit set image), take the component out and apply\n")
	b.WriteString("# again (nothing changes); the waves' directory can go then.\n")
}

// componentHead follows the comment of every component.
const componentHead = `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
`

// writePatch writes a strategic-merge patch setting the image of the
// container of the workload kind/name.
func writePatch(b *strings.Builder, kind, name, container, image string) {
	fmt.Fprintf(b, `  - target:
      kind: %[1]s
      name: %[2]s
    patch: |-
      apiVersion: apps/v1
      kind: %[1]s
      metadata:
        name: %[2]s
      spec:
        template:
          spec:
            containers:
              - name: %[3]s
                image: %[4]s
`, kind, name, container, image)
}

// shortDuration is d as a flag takes it, without zero units: 10m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
