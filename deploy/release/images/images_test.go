package images

import (
	"archive/tar"
	"bufio"
	"debug/buildinfo"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// imagesDir is where `make images` writes the tarballs (bin/images at the
// repository's root), or $CELLKIT_IMAGES.
func imagesDir() string {
	if d := os.Getenv("CELLKIT_IMAGES"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "bin", "images")
}

// TestImages checks the tarballs `make images` wrote: each reads as a
// docker-archive and as an OCI layout, the two agree, the image is valid,
// configured to run its program as nonroot, and the program in its layer is
// a static binary that runs and prints the version the image is labelled
// with.
func TestImages(t *testing.T) {
	for _, p := range Programs {
		t.Run(p.Name, func(t *testing.T) {
			file := filepath.Join(imagesDir(), p.Name+".tar")
			if _, err := os.Stat(file); err != nil {
				t.Fatalf("%v: run make images", err)
			}

			docker, err := tarball.ImageFromPath(file, nil)
			if err != nil {
				t.Fatalf("as a docker-archive: %v", err)
			}
			oci, desc := layoutImage(t, file)
			for _, img := range []struct {
				as  string
				img v1.Image
			}{{"docker-archive", docker}, {"OCI layout", oci}} {
				if err := validate.Image(img.img); err != nil {
					t.Fatalf("as %s: validate.Image: %v", img.as, err)
				}
			}
			checkSameContent(t, docker, oci)

			cf, err := oci.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			labels := checkConfig(t, p, cf)
			version := labels[LabelVersion]

			m, err := oci.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range labels {
				if got := m.Annotations[k]; got != v {
					t.Fatalf("manifest annotation %s: got %q, want %q (the label)", k, got, v)
				}
			}
			repoTags := dockerRepoTags(t, file)
			if len(repoTags) != 1 || !strings.HasSuffix(repoTags[0], "/"+p.Name+":"+version) {
				t.Fatalf("manifest.json RepoTags: got %q, want [REPO/%s:%s]", repoTags, p.Name, version)
			}
			tag, err := name.NewTag(repoTags[0])
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]string{AnnotationRefName: version, AnnotationContainerdName: ContainerdName(tag)} {
				if got := desc.Annotations[k]; got != want {
					t.Fatalf("index.json: annotation %s: got %q, want %q", k, got, want)
				}
			}

			bin := checkLayer(t, p, oci, cf.Created.Time)
			if err := CheckStatic(bin); err != nil {
				t.Fatal(err)
			}
			line, err := CheckVersion(bin, p.Name, version)
			if err != nil {
				t.Fatal(err)
			}
			if want := "revision " + labels[LabelRevision][:12]; !strings.Contains(line, want) {
				t.Fatalf("%s --version: got %q, want it to name %q", p.Name, line, want)
			}
			// The image has no CA roots: a program that calls TLS servers
			// of a public CA (callbacks, registries) carries its own.
			if p.Name != "agencysim" {
				bi, err := buildinfo.ReadFile(bin)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool { return m.Path == "golang.org/x/crypto/x509roots/fallback" }) {
					t.Errorf("%s: no fallback CA roots (golang.org/x/crypto/x509roots/fallback) in an image without roots", p.Name)
				}
			}
		})
	}
}

// layoutImage extracts the tarball as an OCI image layout and returns its
// one image and that image's descriptor in index.json.
func layoutImage(t *testing.T, file string) (v1.Image, v1.Descriptor) {
	t.Helper()
	dir := t.TempDir()
	untar(t, file, dir)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("as an OCI layout: %v", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json: got %d manifests, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d != im.Manifests[0].Digest {
		t.Fatalf("index.json names manifest %s, the blob's digest is %s", im.Manifests[0].Digest, d)
	}
	return img, im.Manifests[0]
}

// untar extracts the regular files and directories of the tar at file
// into dir.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("tar entry %q: not a local path", h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr, 0o644)
		default:
			t.Fatalf("tar entry %q: type %q, want a file or a directory", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// dockerRepoTags reads the RepoTags of the tarball's manifest.json.
func dockerRepoTags(t *testing.T, file string) []string {
	t.Helper()
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(m) != 1 {
		t.Fatalf("manifest.json: got %d images, want 1", len(m))
	}
	return m[0].RepoTags
}

// checkSameContent checks the docker-archive and the OCI layout hold the
// same config and the same layers. (Their manifests differ: a
// docker-archive has none, go-containerregistry derives one with Docker
// media types and no annotations.)
func checkSameContent(t *testing.T, docker, oci v1.Image) {
	t.Helper()
	dc, err := docker.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	oc, err := oci.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if dc != oc {
		t.Fatalf("config digest: docker-archive %s, OCI layout %s", dc, oc)
	}
	dm, err := docker.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	om, err := oci.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if om.Config.Digest != oc {
		t.Fatalf("OCI manifest's config %s, the config's digest %s", om.Config.Digest, oc)
	}
	layerDigests := func(m *v1.Manifest) []v1.Hash {
		var hs []v1.Hash
		for _, l := range m.Layers {
			hs = append(hs, l.Digest)
		}
		return hs
	}
	if got, want := layerDigests(dm), layerDigests(om); !slices.Equal(got, want) {
		t.Fatalf("layers: docker-archive %v, OCI layout %v", got, want)
	}
	if len(om.Layers) != 1 {
		t.Fatalf("got %d layers, want 1", len(om.Layers))
	}
}

var revisionRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// checkConfig checks the image's config and returns its labels.
func checkConfig(t *testing.T, p Program, cf *v1.ConfigFile) map[string]string {
	t.Helper()
	c := cf.Config
	if got, want := c.Entrypoint, []string{"/usr/local/bin/" + p.Name}; !slices.Equal(got, want) {
		t.Fatalf("entrypoint: got %q, want %q", got, want)
	}
	if len(c.Cmd) != 0 {
		t.Fatalf("cmd: got %q, want none", c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Fatalf("user: got %q, want 65532:65532 (not root, not empty)", c.User)
	}
	if got, want := c.WorkingDir, "/home/nonroot"; got != want {
		t.Fatalf("working directory: got %q, want %q", got, want)
	}
	if got, want := c.Env, []string{"PATH=/usr/local/bin"}; !slices.Equal(got, want) {
		t.Fatalf("env: got %q, want %q", got, want)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Fatalf("platform: got %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if cf.Created.IsZero() {
		t.Fatal("no creation time")
	}
	if len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(cf.Created.Time) {
		t.Fatalf("history: got %+v, want one entry created %s", cf.History, cf.Created.Time)
	}

	l := c.Labels
	if got := l[LabelTitle]; got != p.Name {
		t.Fatalf("label %s: got %q, want %q", LabelTitle, got, p.Name)
	}
	if got := l[LabelDescription]; got != p.Description {
		t.Fatalf("label %s: got %q, want %q", LabelDescription, got, p.Description)
	}
	if l[LabelVersion] == "" {
		t.Fatalf("label %s: none", LabelVersion)
	}
	if got := l[LabelRevision]; !revisionRE.MatchString(got) {
		t.Fatalf("label %s: got %q, want a full commit hash", LabelRevision, got)
	}
	if got := l[LabelSource]; !strings.HasPrefix(got, "https://") {
		t.Fatalf("label %s: got %q, want an https URL", LabelSource, got)
	}
	created, err := time.Parse(time.RFC3339, l[LabelCreated])
	if err != nil {
		t.Fatalf("label %s: %v", LabelCreated, err)
	}
	if !created.Equal(cf.Created.Time) {
		t.Fatalf("label %s: got %s, want the config's creation time %s", LabelCreated, created, cf.Created.Time)
	}
	if _, ok := l["org.opencontainers.image.licenses"]; ok {
		t.Fatalf("label org.opencontainers.image.licenses: set, but the licence is not known")
	}
	return l
}

// checkLayer checks the files of the image's layer and writes the
// program's binary into a temporary directory, returning its path.
func checkLayer(t *testing.T, p Program, img v1.Image, created time.Time) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()

	binPath := "usr/local/bin/" + p.Name
	bin := filepath.Join(t.TempDir(), p.Name)
	headers := map[string]*tar.Header{}
	var passwd []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Trim(path.Clean("/"+h.Name), "/")
		headers[n] = h
		if (h.Uid != 0 && h.Uid != NonrootUID) || (h.Gid != 0 && h.Gid != NonrootUID) {
			t.Fatalf("%s: owned by %d:%d, want 0 or 65532", n, h.Uid, h.Gid)
		}
		if h.Mode&(04000|02000) != 0 {
			t.Fatalf("%s: mode %o: setuid or setgid", n, h.Mode)
		}
		if !h.ModTime.Equal(created) {
			t.Fatalf("%s: mtime %s, want the creation time %s", n, h.ModTime, created)
		}
		switch n {
		case binPath:
			if err := writeFile(bin, tr, 0o755); err != nil {
				t.Fatal(err)
			}
		case "etc/passwd":
			if passwd, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, want := range []struct {
		name     string
		typ      byte
		mode     int64
		uid, gid int
	}{
		{"etc", tar.TypeDir, 0o755, 0, 0},
		{"etc/passwd", tar.TypeReg, 0o644, 0, 0},
		{"etc/group", tar.TypeReg, 0o644, 0, 0},
		{"tmp", tar.TypeDir, 0o1777, 0, 0},
		{"home", tar.TypeDir, 0o755, 0, 0},
		{"home/nonroot", tar.TypeDir, 0o700, NonrootUID, NonrootUID},
		{"usr", tar.TypeDir, 0o755, 0, 0},
		{"usr/local", tar.TypeDir, 0o755, 0, 0},
		{"usr/local/bin", tar.TypeDir, 0o755, 0, 0},
		{binPath, tar.TypeReg, 0o755, 0, 0},
	} {
		h, ok := headers[want.name]
		if !ok {
			t.Fatalf("layer: no /%s", want.name)
		}
		if h.Typeflag != want.typ || h.Mode&0o7777 != want.mode || h.Uid != want.uid || h.Gid != want.gid {
			t.Fatalf("/%s: got type %q mode %o owner %d:%d, want type %q mode %o owner %d:%d",
				want.name, h.Typeflag, h.Mode&0o7777, h.Uid, h.Gid, want.typ, want.mode, want.uid, want.gid)
		}
	}

	var nonroot bool
	sc := bufio.NewScanner(strings.NewReader(string(passwd)))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) == 7 && f[0] == "nonroot" && f[2] == "65532" && f[3] == "65532" && f[5] == "/home/nonroot" {
			nonroot = true
		}
	}
	if !nonroot {
		t.Fatalf("/etc/passwd: got %q, want nonroot with uid and gid 65532, home /home/nonroot", passwd)
	}
	return bin
}
