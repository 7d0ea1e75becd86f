package handoff

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Who may take the sockets. A process that got them serves the host's
// port, and with the TLS session ticket keys that come with them it could
// resume sessions that skip the client-certificate check; a process that
// hands its own sockets to a successor takes the port over. So both ends
// are this process's user only, held twice:
//
//   - the Unix socket lives in a private directory: the user's own, no
//     access for group or others, not a symbolic link. The host creates
//     it (0700) before it binds, so the socket is never reachable by
//     another user, not even for the moment between a bind and a chmod;
//     a directory that exists otherwise is refused, by both sides. The
//     directory is opened once, checked through its descriptor, and the
//     socket bound or dialled through that descriptor
//     (/proc/self/fd/N/name): a directory swapped after the check is not
//     the one used.
//   - each end asks the kernel who the other is (SO_PEERCRED): a peer of
//     another effective uid is refused; the successor also holds the
//     host to the pid its state names.

// privateDir opens the directory of a handoff socket, creating it (0700)
// when create is set and it does not exist; it is refused unless it is a
// directory (not a symbolic link) of this process's effective user with
// no access for group or others. The descriptor is the caller's to close.
func privateDir(dir string, create bool) (int, error) {
	if create {
		if err := unix.Mkdir(dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("handoff: create the directory %s: %w", dir, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			err = errors.New("a symbolic link")
		}
		return -1, fmt.Errorf("handoff: the directory %s: %w; want a private one (mode 0700, this process's user's)", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd) // refused: nothing was done through it
		return -1, fmt.Errorf("handoff: the directory %s: %w", dir, err)
	}
	euid := os.Geteuid()
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = errors.New("not a directory")
	case int(st.Uid) != euid:
		err = fmt.Errorf("owned by uid %d, not by this process's user (uid %d)", st.Uid, euid)
	case st.Mode&0o077 != 0:
		err = fmt.Errorf("mode %04o: group or others have access", st.Mode&0o7777)
	}
	if err != nil {
		_ = unix.Close(fd) // refused: nothing was done through it
		return -1, fmt.Errorf("handoff: the directory %s: %w; want a private one (mode 0700, this process's user's)", dir, err)
	}
	return fd, nil
}

// splitSocket is path's directory and its name in it. The directory
// has no trailing slash, which would make the kernel follow it were it
// a symbolic link.
func splitSocket(path string) (dir, name string, err error) {
	clean := filepath.Clean(path)
	dir, name = filepath.Dir(clean), filepath.Base(clean)
	if name == "." || name == ".." || name == string(filepath.Separator) {
		return "", "", fmt.Errorf("handoff: %q names no socket", path)
	}
	return dir, name, nil
}

// inDir is the path of name in the directory open as dirfd, through the
// descriptor: the very directory that was checked.
func inDir(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// peer is the process at the other end of uc, as the kernel says: the
// one that connected, or the one that listened.
func peer(uc *net.UnixConn) (*unix.Ucred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return cred, nil
}

// samePeer is the process at the other end of uc when it runs as this
// process's effective user; an error says who it is otherwise.
func samePeer(uc *net.UnixConn) (*unix.Ucred, error) {
	cred, err := peer(uc)
	if err != nil {
		return nil, fmt.Errorf("who is at the other end: %w", err)
	}
	if euid := os.Geteuid(); int(cred.Uid) != euid {
		return cred, fmt.Errorf("the process at the other end (pid %d) runs as uid %d, not as this process's user (uid %d)", cred.Pid, cred.Uid, euid)
	}
	return cred, nil
}

// listeningStream says why f is not a listening stream socket (nil: it
// is one): a host passes its listening sockets and nothing else.
func listeningStream(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var typ, acc int
	var terr, aerr error
	if err := rc.Control(func(fd uintptr) {
		typ, terr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
		acc, aerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	}); err != nil {
		return err
	}
	switch {
	case terr != nil:
		return fmt.Errorf("not a socket (%w)", terr)
	case aerr != nil:
		return aerr
	case typ != unix.SOCK_STREAM || acc != 1:
		return errors.New("not a listening stream socket")
	}
	return nil
}
