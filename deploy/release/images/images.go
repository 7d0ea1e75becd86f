// Package images builds the OCI images of cellkit's programs without a
// container engine: each image is one layer over an empty base, holding a
// static binary at /usr/local/bin/PROGRAM and the few files a program
// running as an unprivileged user needs (/etc/passwd, /etc/group, /tmp,
// the user's home). Images are reproducible: the same binary, version,
// revision and creation time give the same digests, byte for byte.
//
// WriteTarball writes an image as one tar that is both an OCI image
// layout (oci-layout, index.json, blobs/sha256/…) and a docker-archive (a
// manifest.json naming the same blobs), the layout `docker save` writes
// since Docker 25: `docker load`, old or new, and `crane push` take it.
//
// The formats — manifests, configs, digests, media types, the layout —
// are go-containerregistry's; this package only decides what goes in.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Program is one of cellkit's programs an image is built for.
type Program struct {
	Name        string // the command's name and directory: "cell"
	Description string // one line, the image's description label
}

// Programs are the programs `make images` builds, in the order it builds them.
var Programs = []Program{
	{"router", "cellkit edge router: authenticates platforms by API key, rate-limits them and routes each request to the cell that owns its user"},
	{"cell", "cellkit cell: intake API, JetStream queue and store, the inquiry pipeline to the credit agencies and the admin API"},
	{"cellctl", "cellkit operator CLI: the cell map in the registry, drains, rebalances, overrides and quotas"},
	{"agencysim", "simulated credit agencies (NICE, KCB) over TCP for load tests and drills, with an admin API to change their behaviour"},
	{"operator", "the Kubernetes operator: reconciles Cell resources into cells, puts them in the cell map once ready, drains them before they go"},
}

// Foreign are the programs of others that a cluster of this machine needs
// as images and no registry here serves (make cluster): static binaries
// built from their source, without Go build information or a --version.
var Foreign = []Program{
	{"pause", "Kubernetes' pod sandbox (pause), built from build/pause/linux/pause.c of the k8s.io/kubernetes module"},
	{"nats", "nats-server, the cells' JetStream nodes, built statically from the module at the version cellkit's go.mod requires"},
}

// LookupProgram returns the program of that name.
func LookupProgram(name string) (Program, bool) {
	for _, p := range Programs {
		if p.Name == name {
			return p, true
		}
	}
	return Program{}, false
}

// What every image holds and runs as.
const (
	BinDir      = "/usr/local/bin"
	NonrootUID  = 65532
	NonrootName = "nonroot"
	Home        = "/home/nonroot"
	User        = "65532:65532"
	PathEnv     = "PATH=" + BinDir
)

// The OCI annotation keys the images carry, as labels of the config and
// annotations of the manifest (github.com/opencontainers/image-spec,
// annotations.md).
const (
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelCreated     = "org.opencontainers.image.created"
)

// The annotations of the manifest's descriptor in index.json that name the
// image for tools loading the layout.
const (
	AnnotationRefName        = "org.opencontainers.image.ref.name" // the tag
	AnnotationContainerdName = "io.containerd.image.name"          // the full name; docker load uses it
)

// Spec is what an image is built from.
type Spec struct {
	Program  Program
	Binary   string    // path of the program's static binary
	Version  string    // the version the binary prints; the image's tag
	Revision string    // the full commit the binary was built from
	Source   string    // the source repository's URL
	Created  time.Time // the commit's time: the config's creation time and every file's mtime
	Arch     string    // the GOARCH the binary was built for
	Repo     string    // the repository the image is named in: "cellkit" names it cellkit/PROGRAM:VERSION
}

// Tag is the image's name, REPO/PROGRAM:VERSION.
func (s Spec) Tag() (name.Tag, error) {
	t, err := name.NewTag(s.Repo + "/" + s.Program.Name + ":" + s.Version)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image name: %w", err)
	}
	return t, nil
}

// created is the creation time as the images record it: UTC, whole seconds.
func (s Spec) created() time.Time { return s.Created.UTC().Truncate(time.Second) }

// Labels are the image's labels, also its manifest's annotations.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		LabelTitle:       s.Program.Name,
		LabelDescription: s.Program.Description,
		LabelVersion:     s.Version,
		LabelRevision:    s.Revision,
		LabelSource:      s.Source,
		LabelCreated:     s.created().Format(time.RFC3339),
	}
}

func (s Spec) check() error {
	switch {
	case s.Program.Name == "" || strings.ContainsAny(s.Program.Name, "/ "):
		return fmt.Errorf("program name %q", s.Program.Name)
	case s.Binary == "":
		return fmt.Errorf("%s: no binary", s.Program.Name)
	case s.Version == "":
		return fmt.Errorf("%s: no version", s.Program.Name)
	case s.Revision == "":
		return fmt.Errorf("%s: no revision", s.Program.Name)
	case s.Created.IsZero():
		return fmt.Errorf("%s: no creation time", s.Program.Name)
	case s.Arch == "":
		return fmt.Errorf("%s: no architecture", s.Program.Name)
	}
	_, err := s.Tag()
	return err
}

// Build builds the image of s: an empty base, one gzip layer (RootFS), the
// config running the binary as 65532:65532 in its home, OCI media types.
func Build(s Spec) (v1.Image, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, err
	}
	created := s.created()
	fs, err := RootFS(s.Program.Name, bin, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(fs)), nil },
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.BestCompression),
		tarball.WithCompressedCaching,
	)
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "cellkit images: " + path.Join(BinDir, s.Program.Name) + ", /etc/passwd, /etc/group, /tmp, " + Home,
			Comment:   s.Program.Name + " " + s.Version,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS = "linux"
	cf.Architecture = s.Arch
	cf.Config = v1.Config{
		Entrypoint: []string{path.Join(BinDir, s.Program.Name)},
		User:       User,
		WorkingDir: Home,
		Env:        []string{PathEnv},
		Labels:     s.Labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	annotated, ok := mutate.Annotations(img, s.Labels()).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("%s: annotating the manifest did not give an image", s.Program.Name)
	}
	return annotated, nil
}

// RootFS is the image's one layer, uncompressed: the binary at
// /usr/local/bin/PROGRAM (0755, root's), the accounts of root and nonroot
// (65532), /tmp (1777) and nonroot's home (0700, nonroot's), with the
// directories above them; every entry's mtime is mtime.
func RootFS(program string, binary []byte, mtime time.Time) ([]byte, error) {
	const (
		passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
			"nonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n"
		group = "root:x:0:\n" +
			"nonroot:x:65532:\n"
	)
	type entry struct {
		name    string // without a leading slash; directories end in '/'
		mode    int64
		uid     int
		content []byte
	}
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, content: []byte(group)},
		{name: "etc/passwd", mode: 0o644, content: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: NonrootUID},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/bin/" + program, mode: 0o755, content: binary},
	}
	mtime = mtime.UTC().Truncate(time.Second)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			Uname:   "root",
			Gname:   "root",
			ModTime: mtime,
		}
		if e.uid == NonrootUID {
			h.Uname, h.Gname = NonrootName, NonrootName
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
