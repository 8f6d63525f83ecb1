package main

// A real kubelet over the fake CRI runtime of kubemark's hollow node: it registers a Node,
// reads static pod manifests from a directory the test chooses, creates mirror pods, and
// "runs" the pods scheduled to it (containers are fakes that report Running).
//
// Differences from cmd/kubemark: the static pod path, root directory and ports are flags, the
// fake image service is always used (there is no containerd here), and the healthz and
// read-only ports are off so that several kubelets can share one machine.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
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

	kubelet := kubemark.NewHollowKubelet(flags, config, client, heartbeatClient,
		&cadvisortest.Fake{NodeName: o.nodeName}, fakeRuntime.ImageService, runtimeService,
		cm.NewStubContainerManager())
	kubelet.Run(ctx)
	return nil
}
