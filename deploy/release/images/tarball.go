package images

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DockerManifest is the name of a docker-archive's manifest at the root of
// the tar.
const DockerManifest = "manifest.json"

// Written is what WriteTarball wrote.
type Written struct {
	Path   string  // the tarball
	Tag    string  // REPO/PROGRAM:VERSION
	Digest v1.Hash // the image manifest's digest
	Size   int64   // the tarball's size in bytes
}

func (w Written) String() string {
	return fmt.Sprintf("%s  %s  %s  %.1f MB", w.Path, w.Tag, w.Digest, float64(w.Size)/1e6)
}

// WriteTarball writes img, named tag, to the file at dst as one tar that is
// both an OCI image layout and a docker-archive: oci-layout, index.json
// (the manifest's descriptor annotated with the tag as
// org.opencontainers.image.ref.name and the full name as
// io.containerd.image.name), blobs/sha256/… and manifest.json (config and
// layers by their blobs' paths, the tag in RepoTags). The layout is written
// by go-containerregistry into a directory beside dst, then archived in
// name order, every entry root's with mtime; dst is replaced atomically.
func WriteTarball(dst string, img v1.Image, tag name.Tag, mtime time.Time) (Written, error) {
	w := Written{Path: dst, Tag: tag.String()}
	var err error
	if w.Digest, err = img.Digest(); err != nil {
		return w, err
	}

	dir, base := filepath.Split(dst)
	if dir == "" {
		dir = "."
	}
	tmpDir, err := os.MkdirTemp(dir, "."+base+".layout-*")
	if err != nil {
		return w, err
	}
	defer func() { _ = os.RemoveAll(tmpDir) }() // a temporary directory
	lp, err := layout.Write(tmpDir, empty.Index)
	if err != nil {
		return w, err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		AnnotationRefName:        tag.TagStr(),
		AnnotationContainerdName: ContainerdName(tag),
	})); err != nil {
		return w, err
	}
	dm, err := dockerManifest(img, w.Tag)
	if err != nil {
		return w, err
	}

	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return w, err
	}
	if err := writeArchive(f, tmpDir, dm, mtime); err != nil {
		f.Close()
		_ = os.Remove(f.Name()) // the half-written file; the error above is reported
		return w, err
	}
	if w.Size, err = f.Seek(0, io.SeekCurrent); err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(f.Name()) // as above
		return w, err
	}
	return w, nil
}

// ContainerdName is tag's fully qualified name, as containerd stores images
// and `docker save` writes io.containerd.image.name: cellkit/cell:1.0 is
// docker.io/cellkit/cell:1.0.
func ContainerdName(tag name.Tag) string {
	reg := tag.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + tag.Context().RepositoryStr() + ":" + tag.TagStr()
}

// dockerManifest is the docker-archive's manifest.json for img: its config
// and layers by the paths of their blobs in the layout.
func dockerManifest(img v1.Image, repoTag string) ([]byte, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	d := tarball.Descriptor{Config: blobPath(m.Config.Digest), RepoTags: []string{repoTag}}
	for _, l := range m.Layers {
		d.Layers = append(d.Layers, blobPath(l.Digest))
	}
	return json.Marshal(tarball.Manifest{d})
}

func blobPath(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// writeArchive writes the layout in dir and the docker manifest into one
// tar on w, entries in name order.
func writeArchive(w io.Writer, dir string, dockerManifest []byte, mtime time.Time) error {
	type entry struct {
		name string // slash-separated, directories end in '/'
		file string // the file's path on disk, "" for a directory or the docker manifest
	}
	entries := []entry{{name: DockerManifest}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			entries = append(entries, entry{name: rel + "/"})
		case d.Type().IsRegular():
			if rel == DockerManifest {
				return fmt.Errorf("the layout has a %s of its own", DockerManifest)
			}
			entries = append(entries, entry{name: rel, file: p})
		default:
			return fmt.Errorf("layout: %s is not a regular file", rel)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	mtime = mtime.UTC().Truncate(time.Second)
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mtime, Uname: "root", Gname: "root"}
		switch {
		case e.name == DockerManifest:
			h.Size = int64(len(dockerManifest))
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := tw.Write(dockerManifest); err != nil {
				return err
			}
		case e.file == "":
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		default:
			if err := archiveFile(tw, h, e.file); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// archiveFile writes the file at p to tw with the header h, sized.
func archiveFile(tw *tar.Writer, h *tar.Header, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	h.Size = fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != h.Size {
		err = fmt.Errorf("%s changed while archived", h.Name)
	}
	return err
}
