// Command sunk-netpol enforces Kubernetes NetworkPolicies for the sunk dev cluster's real Nodes.
//
// The real Nodes share the host's network namespace and one Linux bridge, so one instance
// serves them all, as a host process. The host's iptables rules (installed by sunk dev,
// not by this program) send the first packet of every new connection forwarded from the
// bridge to NFQUEUE queue --queue-num; this program answers each with a verdict from
// kube-network-policies' own evaluation (pkg/networkpolicy), so the semantics are the
// reference implementation's. It installs no rules itself: this kernel lacks nftables'
// queue statement, which kube-network-policies' own dataplane needs.
//
// Once its informers have synced and it is bound to the queue it writes --ready-file, so
// whoever installs the rules can wait for it (with no reader, queued packets are dropped).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/api"
	"sigs.k8s.io/kube-network-policies/pkg/network"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
	"sigs.k8s.io/kube-network-policies/pkg/podinfo"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may list and watch pods, namespaces and networkpolicies")
	queue := flag.Uint("queue-num", 100, "the NFQUEUE queue the host's rules send new connections to")
	ready := flag.String("ready-file", "", "written once the informers have synced and the queue is bound")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *kubeconfig, uint16(*queue), *ready); err != nil {
		fmt.Fprintln(os.Stderr, "sunk-netpol:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string, queue uint16, ready string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	engine, err := newEngine(factory)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	synced := factory.WaitForCacheSync(ctx.Done())
	for typ, ok := range synced {
		if !ok {
			return fmt.Errorf("the %v informer never synced", typ)
		}
	}
	nf, err := openQueue(ctx, engine, queue)
	if err != nil {
		return err
	}
	defer nf.Close()
	if ready != "" {
		if err := os.WriteFile(ready, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
			return err
		}
		defer os.Remove(ready)
	}
	klog.InfoS("enforcing NetworkPolicies", "queue", queue)
	<-ctx.Done()
	return nil
}

// newEngine wires kube-network-policies' evaluation to informers from factory, as its own
// standard command does, for every Pod of the cluster: the node name given to
// NewStandardNetworkPolicy only chooses which Pods its own dataplane diverts (unused
// here), never how a packet is judged.
func newEngine(factory informers.SharedInformerFactory) (*networkpolicy.PolicyEngine, error) {
	pods := factory.Core().V1().Pods()
	namespaces := factory.Core().V1().Namespaces()
	policies := factory.Networking().V1().NetworkPolicies()
	if err := pods.Informer().SetTransform(func(obj interface{}) (interface{}, error) {
		if accessor, err := meta.Accessor(obj); err == nil {
			accessor.SetManagedFields(nil)
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	resolver, err := podinfo.NewInformerResolver(pods.Informer())
	if err != nil {
		return nil, err
	}
	provider := podinfo.NewInformerProvider(pods, namespaces, nil, []podinfo.IPResolver{resolver})
	evaluators := []api.PolicyEvaluator{}
	if klog.V(2).Enabled() {
		evaluators = append(evaluators, networkpolicy.NewLoggingPolicy())
	}
	evaluators = append(evaluators, networkpolicy.NewStandardNetworkPolicy("", namespaces, pods, policies))
	// Touch the listers so the factory starts their informers.
	_ = namespaces.Informer()
	_ = policies.Informer()
	return networkpolicy.NewPolicyEngine(provider, evaluators), nil
}

// verdict judges one queued packet (its IP header and the start of its payload): accept
// what the policies allow, drop the rest, and drop what cannot be parsed.
func verdict(ctx context.Context, engine *networkpolicy.PolicyEngine, payload []byte, id uint32) int {
	packet, err := network.ParsePacket(payload)
	if err != nil {
		klog.ErrorS(err, "dropping a packet that does not parse", "id", id)
		return nfqueue.NfDrop
	}
	packet.ID = id
	allowed, err := engine.EvaluatePacket(ctx, &packet)
	if err != nil || !allowed {
		klog.V(1).InfoS("dropped", "src", packet.SrcIP, "dst", packet.DstIP, "port", packet.DstPort, "proto", packet.Proto)
		return nfqueue.NfDrop
	}
	return nfqueue.NfAccept
}

// openQueue binds queue and answers every packet it receives until ctx ends. No fail-open
// flag: a reader that falls behind drops new connections, visibly.
func openQueue(ctx context.Context, engine *networkpolicy.PolicyEngine, queue uint16) (*nfqueue.Nfqueue, error) {
	nf, err := nfqueue.Open(&nfqueue.Config{
		NfQueue:      queue,
		Flags:        nfqueue.NfQaCfgFlagGSO,
		MaxPacketLen: 128, // headers only
		MaxQueueLen:  1024,
		Copymode:     nfqueue.NfQnlCopyPacket,
		WriteTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("opening NFQUEUE %d: %w", queue, err)
	}
	// Keep reading when the socket's buffer overflowed once (the kernel says ENOBUFS).
	if err := nf.SetOption(netlink.NoENOBUFS, true); err != nil {
		nf.Close()
		return nil, err
	}
	hook := func(a nfqueue.Attribute) int {
		if a.PacketID == nil {
			return 0
		}
		v := nfqueue.NfDrop
		if a.Payload != nil {
			v = verdict(ctx, engine, *a.Payload, *a.PacketID)
		}
		if err := nf.SetVerdict(*a.PacketID, v); err != nil {
			klog.ErrorS(err, "answering a packet", "id", *a.PacketID)
		}
		return 0
	}
	onError := func(err error) int {
		if op, ok := err.(*netlink.OpError); ok && (op.Timeout() || op.Temporary()) {
			return 0
		}
		klog.ErrorS(err, "reading the queue")
		return 0
	}
	if err := nf.RegisterWithErrorFunc(ctx, hook, onError); err != nil {
		nf.Close()
		return nil, fmt.Errorf("reading NFQUEUE %d: %w", queue, err)
	}
	return nf, nil
}
