package main

// A real kubelet built as kubemark's hollow node is: it registers a Node, reads static pod
// manifests from a directory the test chooses, creates mirror pods and runs the pods scheduled
// to it. Its container runtime is chosen with --runtime:
//
//   - fake: kubemark's fake CRI runtime; containers are fakes that report Running;
//   - process: procruntime.go; containers are real processes, and the kubelet's real prober
//     runs their probes (kubemark's prober is a fake that reports every container Ready).
//
// Differences from cmd/kubemark: the static pod path, root directory and ports are flags, the
// image service is the runtime's own (there is no containerd here), and the healthz and
// read-only ports are off so that several kubelets can share one machine.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubemark"
	utilflag "k8s.io/kubernetes/pkg/util/flag"

	v1 "k8s.io/api/core/v1"
)

type kubeletOptions struct {
	kubeconfig        string
	nodeName          string
	rootDir           string
	staticPodPath     string
	port              int
	nodeIP            string
	fileCheckInterval time.Duration
	nodeLabels        map[string]string
	taints            []v1.Taint
	runtime           string
	imageDir          string
	hostRoot          string
	clientCAFile      string
}

func newKubeletCommand() *cobra.Command {
	o := &kubeletOptions{nodeLabels: map[string]string{}}
	cmd := &cobra.Command{
		Use:   "kubelet",
		Short: "kubelet with kubemark's fake container runtime",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runKubelet(cmd, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the node's identity (required)")
	fs.StringVar(&o.nodeName, "node-name", "", "name of the Node to register (required)")
	fs.StringVar(&o.rootDir, "root-dir", "", "kubelet state directory (required)")
	fs.StringVar(&o.staticPodPath, "pod-manifest-path", "", "static pod directory (required)")
	fs.IntVar(&o.port, "port", 0, "port of the kubelet API on --node-ip (plain HTTP; required)")
	fs.StringVar(&o.nodeIP, "node-ip", "127.0.0.1", "address the Node reports and the kubelet API binds")
	fs.DurationVar(&o.fileCheckInterval, "file-check-frequency", 2*time.Second, "static pod directory rescan period (inotify reacts sooner)")
	labels := cliflag.ConfigurationMap(o.nodeLabels)
	fs.Var(&labels, "node-labels", "labels to register the Node with (k=v,...)")
	fs.Var(utilflag.RegisterWithTaintsVar{Value: &o.taints}, "register-with-taints", "taints to register the Node with (k=v:Effect,...)")
	fs.StringVar(&o.runtime, "runtime", "fake", "container runtime: fake (kubemark's) or process (containers are real processes)")
	fs.StringVar(&o.imageDir, "image-dir", "", "process runtime: directory of the binaries that stand for images (required with --runtime=process)")
	fs.StringVar(&o.hostRoot, "host-root", "", "process runtime: the directory hostPath volumes resolve under (required with --runtime=process)")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "process runtime: CA of the clients of the kubelet API (the API server's kubelet client certificate); the API is served over TLS with webhook authorization")
	return cmd
}

func runKubelet(cmd *cobra.Command, o *kubeletOptions) error {
	if o.kubeconfig == "" || o.nodeName == "" || o.rootDir == "" || o.staticPodPath == "" || o.port == 0 {
		return fmt.Errorf("--kubeconfig, --node-name, --root-dir, --pod-manifest-path and --port are required")
	}
	ctx := cmd.Context()
	clientConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", o.kubeconfig, err)
	}
	clientConfig.UserAgent = "kubelet"
	client, err := kubernetes.NewForConfig(clientConfig)
	if err != nil {
		return err
	}
	flags, config := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName:           o.nodeName,
		KubeletPort:        o.port,
		MaxPods:            110,
		NodeLabels:         o.nodeLabels,
		RegisterWithTaints: o.taints,
	})
	// GetHollowKubeletConfig makes its own temp dirs; point everything at the test's dirs.
	_ = os.RemoveAll(filepath.Dir(config.StaticPodPath))
	flags.RootDirectory = o.rootDir
	flags.NodeIP = o.nodeIP
	config.StaticPodPath = o.staticPodPath
	config.PodLogsDir = filepath.Join(o.rootDir, "pod-logs")
	config.FileCheckFrequency.Duration = o.fileCheckInterval
	config.SyncFrequency.Duration = 2 * time.Second
	config.NodeStatusUpdateFrequency.Duration = 2 * time.Second
	config.Address = o.nodeIP
	config.ReadOnlyPort = 0
	config.HealthzPort = 0
	for _, dir := range []string{o.rootDir, config.PodLogsDir, o.staticPodPath} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}

	heartbeatConfig := *clientConfig
	heartbeatConfig.Timeout = config.NodeStatusUpdateFrequency.Duration
	heartbeatConfig.QPS = -1
	heartbeatClient, err := kubernetes.NewForConfig(&heartbeatConfig)
	if err != nil {
		return err
	}

	var kubelet *kubemark.HollowKubelet
	switch o.runtime {
	case "fake":
		endpoint := "unix://" + filepath.Join(o.rootDir, "fake-cri.sock")
		fakeRuntime := fakeremote.NewFakeRemoteRuntime()
		if err := fakeRuntime.Start(endpoint); err != nil {
			return fmt.Errorf("starting the fake runtime on %s: %w", endpoint, err)
		}
		defer fakeRuntime.Stop()
		runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
		if err != nil {
			return err
		}
		kubelet = kubemark.NewHollowKubelet(flags, config, client, heartbeatClient,
			&cadvisortest.Fake{NodeName: o.nodeName}, fakeRuntime.ImageService, runtimeService,
			cm.NewStubContainerManager())
	case "process":
		if o.imageDir == "" || o.hostRoot == "" {
			return fmt.Errorf("--runtime=process needs --image-dir and --host-root")
		}
		// containerd's own socket path on the node, so an anchor reaches this runtime exactly
		// as it would containerd (its chart mounts the host's /run/containerd).
		socket := filepath.Join(o.hostRoot, "run", "containerd", "containerd.sock")
		if len(socket) >= 108 {
			return fmt.Errorf("the runtime socket %s is longer than a unix socket path may be: use a shorter TMPDIR", socket)
		}
		if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
			return err
		}
		endpoint := "unix://" + socket
		apiHost, apiPort := apiAddress(clientConfig.Host)
		// Containers of an earlier run of this node died with it; their state goes too.
		_ = os.RemoveAll(filepath.Join(o.rootDir, "process-runtime"))
		runtime, err := newProcessRuntime(processRuntimeOptions{
			nodeIP:     o.nodeIP,
			imageDir:   o.imageDir,
			hostRoot:   o.hostRoot,
			kubeletDir: o.rootDir,
			stateDir:   filepath.Join(o.rootDir, "process-runtime"),
			apiHost:    apiHost,
			apiPort:    apiPort,
		})
		if err != nil {
			return err
		}
		if err := runtime.Start(endpoint); err != nil {
			return err
		}
		defer runtime.Stop()
		runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
		if err != nil {
			return err
		}
		imageService, err := remote.NewRemoteImageService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
		if err != nil {
			return err
		}
		kubelet = kubemark.NewHollowKubelet(flags, config, client, heartbeatClient,
			&cadvisortest.Fake{NodeName: o.nodeName}, imageService, runtimeService,
			cm.NewStubContainerManager())
		// nil: the kubelet builds its real prober (exec probes through the runtime's ExecSync,
		// HTTP and TCP probes against the pod's address).
		kubelet.KubeletDeps.ProbeManager = nil
		// The kubelet's own files (termination-message files, pod log dirs, log GC) are real,
		// but for the legacy /var/log/containers links, which would be shared by every node
		// of the machine.
		kubelet.KubeletDeps.OSInterface = nodeOS{}
		// The kubelet API as a real node serves it (kubectl logs goes through it): TLS with a
		// self-signed serving certificate, x509 client certificates, webhook authorization.
		if o.clientCAFile != "" {
			flags.CertDirectory = filepath.Join(o.rootDir, "pki")
			config.Authentication.X509.ClientCAFile = o.clientCAFile
			config.Authentication.Webhook.Enabled = true
			config.Authentication.Anonymous.Enabled = false
			config.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
			tls, err := kubeletapp.InitializeTLS(ctx, flags, config)
			if err != nil {
				return err
			}
			auth, reload, err := kubeletapp.BuildAuth(types.NodeName(o.nodeName), client, *config)
			if err != nil {
				return err
			}
			reload(ctx.Done())
			kubelet.KubeletDeps.TLSOptions = tls
			kubelet.KubeletDeps.Auth = auth
		}
	default:
		return fmt.Errorf("--runtime must be fake or process, not %q", o.runtime)
	}
	kubelet.Run(ctx)
	return nil
}

// nodeOS is the real OS interface, without the kubelet's /var/log/containers symlinks.
type nodeOS struct{ kubecontainer.RealOS }

func (nodeOS) Symlink(string, string) error { return nil }
