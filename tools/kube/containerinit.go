package main

// `kube container-init SPEC`: the first process of a container of the process runtime
// (procruntime.go). It starts in a private mount namespace, builds the container's root on a
// tmpfs, chroots into it and execs the container's command. A failed setup or exec is reported
// on fd 3, which closes on a successful exec, so the runtime can fail StartContainer the way
// runc fails a start.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func containerInit(args []string) {
	report := os.NewFile(3, "start-report")
	fail := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		if report != nil {
			fmt.Fprintln(report, msg)
		}
		fmt.Fprintln(os.Stderr, "container-init:", msg)
		os.Exit(128)
	}
	if len(args) != 1 {
		fail("usage: kube container-init SPEC")
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		fail("reading the container spec: %v", err)
	}
	var spec containerSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		fail("decoding %s: %v", args[0], err)
	}
	if err := buildRoot(&spec); err != nil {
		fail("%v", err)
	}
	if err := unix.Chroot(spec.Rootfs); err != nil {
		fail("chroot %s: %v", spec.Rootfs, err)
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if err := os.Chdir(cwd); err != nil {
		fail("working directory %s: %v", cwd, err)
	}
	if len(spec.Args) == 0 {
		fail("no command: the pod gives none and the image has no entrypoint")
	}
	path, err := lookPath(spec.Args[0], spec.Env)
	if err != nil {
		fail("%v", err)
	}
	argv := spec.Privileges.command(append([]string{path}, spec.Args[1:]...))
	unix.CloseOnExec(3)
	err = syscall.Exec(argv[0], argv, spec.Env)
	fail("exec %s: %v", argv[0], err)
}

// lookPath finds a command in the container's PATH, inside the container's root.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		candidate := filepath.Join(dir, name)
		if st, err := os.Stat(candidate); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func bind(source, target string, readonly, recursive bool) error {
	flags := uintptr(unix.MS_BIND)
	if recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(source, target, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, err)
	}
	if readonly {
		if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", target, err)
		}
	}
	return nil
}

// mountPoint creates what a bind of `source` needs at `target`: a directory or an empty file.
func mountPoint(source, target string) error {
	st, err := os.Stat(source)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if st.IsDir() {
		return os.MkdirAll(target, 0o755)
	}
	if _, err := os.Lstat(target); err == nil {
		return nil // e.g. /etc/hosts, bound from the host and now replaced by the pod's own
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// copyLinkOrBind recreates host entry `/name` in the root: a symlink as a symlink (merged /usr),
// a directory as a read-only bind.
func copyLinkOrBind(root, name string) error {
	host := "/" + name
	st, err := os.Lstat(host)
	if err != nil {
		return nil
	}
	target := filepath.Join(root, name)
	if st.Mode()&os.ModeSymlink != 0 {
		link, err := os.Readlink(host)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.Symlink(link, target)
	}
	if err := mountPoint(host, target); err != nil {
		return err
	}
	return bind(host, target, true, true)
}

func buildRoot(spec *containerSpec) error {
	root := spec.Rootfs
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "mode=0755,size=64m"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", root, err)
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if err := copyLinkOrBind(root, name); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir("/usr")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != "local" {
			if err := copyLinkOrBind(root, "usr/"+e.Name()); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "services", "protocols", "localtime", "ssl", "ca-certificates"} {
		if err := copyLinkOrBind(root, "etc/"+name); err != nil {
			return err
		}
	}
	for _, dir := range []string{"tmp", "run", "var/tmp", "root", "proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("proc: %w", err)
	}
	if spec.BootID != "" {
		if err := bind(spec.BootID, filepath.Join(root, "proc/sys/kernel/random/boot_id"), true, false); err != nil {
			return err
		}
	}
	if err := bind("/dev", filepath.Join(root, "dev"), false, true); err != nil {
		return err
	}
	if err := bind("/sys", filepath.Join(root, "sys"), true, false); err != nil {
		return err
	}
	image := filepath.Join(root, "usr/local/bin", spec.BinaryName)
	if err := mountPoint(spec.Binary, image); err != nil {
		return err
	}
	if err := bind(spec.Binary, image, true, false); err != nil {
		return err
	}
	// Parents before children, as containerd orders mounts.
	mounts := append([]specMount{}, spec.Mounts...)
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.Count(filepath.Clean(mounts[i].Target), "/") < strings.Count(filepath.Clean(mounts[j].Target), "/")
	})
	for _, m := range mounts {
		target := filepath.Join(root, m.Target)
		if err := mountPoint(m.Source, target); err != nil {
			return fmt.Errorf("volume at %s: %w", m.Target, err)
		}
		if err := bind(m.Source, target, m.Readonly, true); err != nil {
			return err
		}
	}
	if spec.ReadonlyRootfs {
		if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only root: %w", err)
		}
	}
	return nil
}
