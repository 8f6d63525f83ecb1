package main

// A CRI runtime whose containers are real processes, for test nodes that share one machine.
//
// It serves the CRI over a unix socket, so the kubelet talks to it through the same remote
// client it uses for containerd. Bookkeeping (sandboxes, containers, filters, image list) is the
// CRI test fake's; everything a process does is real:
//
//   - an image is a binary: the last path element of the image name, without tag or digest,
//     is looked up in --image-dir (kube-anchor, etcd, kube-apiserver, ...); an unknown image
//     fails the pull as a registry would, so the kubelet reports ErrImagePull itself;
//   - a container is that binary (or the command the pod gives) started by `kube
//     container-init` in a private mount namespace with a root of its own: the host's /usr and
//     a few /etc files read-only, the image binary at /usr/local/bin/<name>, and every mount
//     the kubelet asks for bound at its container path. hostPath sources outside the kubelet's
//     root dir resolve under the node's --host-root, which plays the node's "/";
//   - stdout and stderr go to the CRI log file in the CRI log format, so `kubectl logs` works;
//   - exit codes, start and finish times are reported, so restart back-off, restartCount,
//     CrashLoopBackOff and lastState are the kubelet's own;
//   - StopContainer sends SIGTERM to the container's process group, then SIGKILL after the
//     grace period; ExecSync (exec probes, preStop hooks) runs the command in the container's
//     mount namespace and root with the container's environment (util-linux nsenter).
//
//   - every start of the runtime is a boot of the node: containers read a boot id of the node's
//     own at /proc/sys/kernel/random/boot_id, made anew when the runtime starts (the machine's
//     boot id does not change when a test "reboots" a node);
//
//   - a container's privileges are enforced as runc enforces them (privileges.go): its user,
//     group and supplementary groups, its capability set (containerd's defaults, then the
//     pod's add and drop; all of them only when privileged), no_new_privs, a read-only root;
//     exec probes and preStop hooks run with the same privileges.
//
// Not isolated: processes share the node's network (every sandbox reports the node IP), have no
// seccomp profile and no cgroup limits. The node's processes share one PID namespace, made by
// the test harness, so killing the node kills them all at once.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
	"k8s.io/klog/v2"
)

type processRuntimeOptions struct {
	nodeIP     string
	imageDir   string
	hostRoot   string
	kubeletDir string
	stateDir   string
	apiHost    string
	apiPort    string
}

type processRuntime struct {
	*fakeremote.RemoteRuntime
	opts   processRuntimeOptions
	self   string
	server *grpc.Server

	mu         sync.Mutex
	containers map[string]*processContainer
}

type processContainer struct {
	id        string
	sandboxID string
	config    *runtimeapi.ContainerConfig
	binary    string
	logPath   string
	env       []string
	pid       int
	done      chan struct{} // closed when the process has exited
}

func newProcessRuntime(opts processRuntimeOptions) (*processRuntime, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"nsenter", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the process runtime needs %s (util-linux): %w", tool, err)
		}
	}
	r := &processRuntime{
		RemoteRuntime: fakeremote.NewFakeRemoteRuntime(),
		opts:          opts,
		self:          self,
		server:        grpc.NewServer(),
		containers:    map[string]*processContainer{},
	}
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	if err := os.MkdirAll(opts.stateDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(r.bootIDFile(), []byte(newBootID()+"\n"), 0o444); err != nil {
		return nil, fmt.Errorf("boot id: %w", err)
	}
	// The remote image client refuses an image without a size.
	r.ImageService.SetFakeImageSize(1 << 20)
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	runtimeapi.RegisterImageServiceServer(r.server, r)
	return r, nil
}

func (r *processRuntime) Start(endpoint string) error {
	l, err := util.CreateListener(endpoint)
	if err != nil {
		return fmt.Errorf("listening on %q: %w", endpoint, err)
	}
	go func() { _ = r.server.Serve(l) }()
	// The fakes record every call; keep that record from growing for the life of a node.
	go func() {
		for range time.Tick(time.Minute) {
			r.RuntimeService.Lock()
			r.RuntimeService.Called = nil
			r.RuntimeService.Unlock()
			r.ImageService.Lock()
			r.ImageService.Called = nil
			r.ImageService.Unlock()
		}
	}()
	return nil
}

func (r *processRuntime) Stop() { r.server.Stop() }

// imageBinary maps an image name to its binary in the image dir.
func (r *processRuntime) imageBinary(image string) (string, error) {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	name = name[strings.LastIndex(name, "/")+1:]
	if i := strings.Index(name, ":"); i >= 0 {
		name = name[:i]
	}
	path := filepath.Join(r.opts.imageDir, name)
	if st, err := os.Stat(path); err != nil || st.IsDir() || name == "" {
		return "", status.Errorf(codes.NotFound, "pulling %q: manifest unknown: no image %q in %s", image, name, r.opts.imageDir)
	}
	return path, nil
}

func (r *processRuntime) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	if _, err := r.imageBinary(req.GetImage().GetImage()); err != nil {
		return nil, err
	}
	return r.RemoteRuntime.PullImage(ctx, req)
}

func (r *processRuntime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	resp, err := r.RemoteRuntime.RunPodSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	if dir := req.GetConfig().GetLogDirectory(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	r.RuntimeService.Lock()
	if s, ok := r.RuntimeService.Sandboxes[resp.PodSandboxId]; ok {
		s.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: r.opts.nodeIP}
	}
	r.RuntimeService.Unlock()
	return resp, nil
}

func (r *processRuntime) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	for _, c := range r.containersOf(req.PodSandboxId) {
		r.stop(c, 0)
	}
	return r.RemoteRuntime.StopPodSandbox(ctx, req)
}

func (r *processRuntime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	for _, c := range r.containersOf(req.PodSandboxId) {
		r.stop(c, 0)
		r.forget(c.id)
	}
	return r.RemoteRuntime.RemovePodSandbox(ctx, req)
}

func (r *processRuntime) containersOf(sandboxID string) []*processContainer {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*processContainer
	for _, c := range r.containers {
		if c.sandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out
}

func (r *processRuntime) container(id string) (*processContainer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", id)
	}
	return c, nil
}

func (r *processRuntime) forget(id string) {
	r.mu.Lock()
	delete(r.containers, id)
	r.mu.Unlock()
	_ = os.RemoveAll(filepath.Join(r.opts.stateDir, "containers", id))
}

func (r *processRuntime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	binary, err := r.imageBinary(req.GetConfig().GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	config := req.GetConfig()
	logPath := ""
	if config.GetLogPath() != "" {
		logPath = filepath.Join(req.GetSandboxConfig().GetLogDirectory(), config.GetLogPath())
	}
	r.RuntimeService.Lock()
	if c, ok := r.RuntimeService.Containers[resp.ContainerId]; ok {
		c.LogPath = logPath
		c.Mounts = config.GetMounts()
	}
	r.RuntimeService.Unlock()
	r.mu.Lock()
	r.containers[resp.ContainerId] = &processContainer{
		id:        resp.ContainerId,
		sandboxID: req.PodSandboxId,
		config:    config,
		binary:    binary,
		logPath:   logPath,
		env:       r.environment(config),
	}
	r.mu.Unlock()
	return resp, nil
}

// environment is what the container's process gets: a default PATH as an image would set, the
// kubelet's variables, and the API server's loopback address in place of the Service IP (there
// is no kube-proxy on these nodes).
func (r *processRuntime) environment(config *runtimeapi.ContainerConfig) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	for _, kv := range config.GetEnvs() {
		switch kv.Key {
		case "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS":
			continue
		}
		env = append(env, kv.Key+"="+string(kv.Value))
	}
	if r.opts.apiHost != "" {
		env = append(env,
			"KUBERNETES_SERVICE_HOST="+r.opts.apiHost,
			"KUBERNETES_SERVICE_PORT="+r.opts.apiPort,
			"KUBERNETES_SERVICE_PORT_HTTPS="+r.opts.apiPort)
	}
	return env
}

// bootIDFile is the node's boot id for this start of the runtime (one boot of the node).
func (r *processRuntime) bootIDFile() string {
	return filepath.Join(r.opts.stateDir, "boot_id")
}

// newBootID is a random UUID in the kernel's boot_id format.
func newBootID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// containerSpec is what `kube container-init` reads.
type containerSpec struct {
	Rootfs         string      `json:"rootfs"`
	Binary         string      `json:"binary"`
	BinaryName     string      `json:"binaryName"`
	Args           []string    `json:"args"`
	Env            []string    `json:"env"`
	Cwd            string      `json:"cwd"`
	ReadonlyRootfs bool        `json:"readonlyRootfs"`
	Mounts         []specMount `json:"mounts"`
	// The node's boot id, bound over the container's /proc/sys/kernel/random/boot_id.
	BootID string `json:"bootID"`
	// What the process may do, applied by setpriv as the last step before the command.
	Privileges privileges `json:"privileges"`
}

type specMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Readonly bool   `json:"readonly"`
}

func (r *processRuntime) spec(c *processContainer, dir string) (containerSpec, error) {
	name := filepath.Base(c.binary)
	args := append(append([]string{}, c.config.GetCommand()...), c.config.GetArgs()...)
	if len(c.config.GetCommand()) == 0 {
		// The image's entrypoint is its binary.
		args = append([]string{"/usr/local/bin/" + name}, c.config.GetArgs()...)
	}
	spec := containerSpec{
		Rootfs:         filepath.Join(dir, "rootfs"),
		Binary:         c.binary,
		BinaryName:     name,
		Args:           args,
		Env:            c.env,
		Cwd:            c.config.GetWorkingDir(),
		ReadonlyRootfs: c.config.GetLinux().GetSecurityContext().GetReadonlyRootfs(),
		BootID:         r.bootIDFile(),
		Privileges:     containerPrivileges(c.config.GetLinux().GetSecurityContext()),
	}
	for _, m := range c.config.GetMounts() {
		source := m.HostPath
		if !isWithin(source, r.opts.kubeletDir) {
			source = filepath.Join(r.opts.hostRoot, source)
			// As containerd does, a missing bind source becomes a directory.
			if _, err := os.Lstat(source); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(source, 0o755); err != nil {
					return spec, err
				}
			}
		}
		spec.Mounts = append(spec.Mounts, specMount{Source: source, Target: m.ContainerPath, Readonly: m.Readonly})
	}
	return spec, nil
}

func isWithin(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func (r *processRuntime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := r.container(req.ContainerId)
	if err != nil {
		return nil, err
	}
	if err := r.start(c); err != nil {
		r.exited(c.id, 128, "StartError", err.Error())
		return nil, status.Errorf(codes.Unknown, "starting container %s: %v", c.id, err)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func (r *processRuntime) start(c *processContainer) error {
	dir := filepath.Join(r.opts.stateDir, "containers", c.id)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o700); err != nil {
		return err
	}
	spec, err := r.spec(c, dir)
	if err != nil {
		return err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	specPath := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specPath, data, 0o600); err != nil {
		return err
	}
	var logFile io.Writer = io.Discard
	if c.logPath != "" {
		if err := os.MkdirAll(filepath.Dir(c.logPath), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return err
		}
		logFile = f
	}
	log := &criLog{w: logFile}
	// container-init reports a failed setup or exec on fd 3 and closes it on a successful exec.
	startR, startW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(r.self, "container-init", specPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
	cmd.ExtraFiles = []*os.File{startW}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		startR.Close()
		startW.Close()
		return err
	}
	startW.Close()
	report, _ := io.ReadAll(startR)
	startR.Close()
	var streams sync.WaitGroup
	streams.Add(2)
	go func() { defer streams.Done(); log.copy("stdout", stdout) }()
	go func() { defer streams.Done(); log.copy("stderr", stderr) }()
	done, pid := make(chan struct{}), cmd.Process.Pid
	r.mu.Lock()
	c.done, c.pid = done, pid
	r.mu.Unlock()
	if len(report) > 0 {
		streams.Wait()
		_ = cmd.Wait()
		close(done)
		return errors.New(strings.TrimSpace(string(report)))
	}
	r.RuntimeService.Lock()
	if fc, ok := r.RuntimeService.Containers[c.id]; ok {
		fc.State = runtimeapi.ContainerState_CONTAINER_RUNNING
		fc.StartedAt = time.Now().UnixNano()
	}
	r.RuntimeService.Unlock()
	klog.InfoS("container started", "id", c.id, "pid", pid, "args", spec.Args)
	go func() {
		streams.Wait()
		err := cmd.Wait()
		code, reason := 0, "Completed"
		if err != nil {
			reason = "Error"
			code = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		klog.InfoS("container exited", "id", c.id, "pid", pid, "exitCode", code)
		r.exited(c.id, int32(code), reason, "")
		if f, ok := logFile.(*os.File); ok {
			f.Close()
		}
		close(done)
	}()
	return nil
}

func (r *processRuntime) exited(id string, code int32, reason, message string) {
	r.RuntimeService.Lock()
	defer r.RuntimeService.Unlock()
	if fc, ok := r.RuntimeService.Containers[id]; ok {
		fc.State = runtimeapi.ContainerState_CONTAINER_EXITED
		fc.FinishedAt = time.Now().UnixNano()
		if fc.StartedAt == 0 {
			fc.StartedAt = fc.FinishedAt
		}
		fc.ExitCode = code
		fc.Reason = reason
		fc.Message = message
	}
}

// process is the container's process: its pid and a channel closed when it has exited, or a
// nil channel if it never started.
func (r *processRuntime) process(c *processContainer) (int, chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return c.pid, c.done
}

// running is the pid of the container's process while it runs.
func (r *processRuntime) running(c *processContainer) (int, bool) {
	pid, done := r.process(c)
	if done == nil {
		return 0, false
	}
	select {
	case <-done:
		return 0, false
	default:
		return pid, true
	}
}

// stop sends SIGTERM to the container's process group, and SIGKILL after `grace` seconds.
func (r *processRuntime) stop(c *processContainer, grace int64) {
	pid, done := r.process(c)
	if done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	if grace > 0 {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-done:
			return
		case <-time.After(time.Duration(grace) * time.Second):
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-done
}

func (r *processRuntime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := r.container(req.ContainerId)
	if err != nil {
		return nil, err
	}
	if _, done := r.process(c); done == nil {
		return r.RemoteRuntime.StopContainer(ctx, req)
	}
	r.stop(c, req.Timeout)
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *processRuntime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	if c, err := r.container(req.ContainerId); err == nil {
		r.stop(c, 0)
		r.forget(c.id)
	}
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

func (r *processRuntime) ReopenContainerLog(context.Context, *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

func (r *processRuntime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := r.container(req.ContainerId)
	if err != nil {
		return nil, err
	}
	pid, ok := r.running(c)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", c.id)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.Timeout)*time.Second)
		defer cancel()
	}
	// As runc exec does: the command gets the container's user and capabilities.
	args := append([]string{"--target", fmt.Sprint(pid), "--mount", "--root", "--wd", "--"},
		containerPrivileges(c.config.GetLinux().GetSecurityContext()).command(req.Cmd)...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = c.env
	var stdout, stderr strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "command %q timed out after %ds", req.Cmd, req.Timeout)
	}
	code := int32(0)
	if err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return nil, err
		}
		code = int32(exitErr.ExitCode())
	}
	return &runtimeapi.ExecSyncResponse{Stdout: []byte(stdout.String()), Stderr: []byte(stderr.String()), ExitCode: code}, nil
}

// criLog writes a stream in the CRI log format ("<time> <stream> <F|P> <line>").
type criLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *criLog) copy(stream string, r io.Reader) {
	reader := bufio.NewReaderSize(r, 16*1024)
	for {
		line, isPrefix, err := reader.ReadLine()
		if len(line) > 0 || (err == nil && !isPrefix) {
			tag := "F"
			if isPrefix {
				tag = "P"
			}
			l.mu.Lock()
			fmt.Fprintf(l.w, "%s %s %s %s\n", time.Now().Format(time.RFC3339Nano), stream, tag, line)
			l.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// apiAddress splits the kubeconfig's server URL into the host and port the containers use.
func apiAddress(server string) (string, string) {
	hostport := strings.TrimPrefix(strings.TrimPrefix(server, "https://"), "http://")
	hostport = strings.TrimSuffix(hostport, "/")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, "443"
	}
	return host, port
}
