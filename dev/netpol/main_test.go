package main

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

const (
	serverIP = "10.99.0.2"
	clientIP = "10.99.0.3"
	port     = 5000
)

func pod(name, ip string, labels map[string]string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "canary", Labels: labels},
		Spec:       v1.PodSpec{NodeName: "real-" + name},
		Status: v1.PodStatus{
			Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}},
		},
	}
}

func denyIngress() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-all", Namespace: "canary"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// allowFromClient lets Pods labelled role=client reach the server's port.
func allowFromClient() *networkingv1.NetworkPolicy {
	p := denyIngress()
	p.Name = "allow-client"
	tcp := v1.ProtocolTCP
	p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp}},
	}}
	return p
}

// cluster is a fake API server's content, an engine judging by it, and its client.
func cluster(t *testing.T, ctx context.Context) (*networkpolicy.PolicyEngine, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(
		&v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "canary"}},
		pod("server", serverIP, map[string]string{"role": "server"}),
		pod("client", clientIP, map[string]string{"role": "client"}),
		pod("stranger", "10.99.0.4", map[string]string{"role": "stranger"}),
	)
	factory := informers.NewSharedInformerFactory(client, 0)
	engine, err := newEngine(factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v never synced", typ)
		}
	}
	return engine, client
}

// syn is the IPv4 header and TCP header of a connection's first packet.
func syn(src, dst string, dport uint16) []byte {
	b := make([]byte, 40)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], 40)
	b[8] = 64
	b[9] = 6 // TCP
	copy(b[12:16], ip4(src))
	copy(b[16:20], ip4(dst))
	binary.BigEndian.PutUint16(b[20:], 40000)
	binary.BigEndian.PutUint16(b[22:], dport)
	b[32] = 5 << 4
	b[33] = 0x02 // SYN
	return b
}

func ip4(s string) []byte {
	out := make([]byte, 4)
	for i, part := range strings.Split(s, ".") {
		var n int
		for _, c := range part {
			n = n*10 + int(c-'0')
		}
		out[i] = byte(n)
	}
	return out
}

// eventually waits for the informers to see a change made through the fake client.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The verdict for a queued packet is kube-network-policies' evaluation of it.
func TestVerdictFollowsThePolicies(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engine, client := cluster(t, ctx)
	fromClient := syn(clientIP, serverIP, port)
	fromStranger := syn("10.99.0.4", serverIP, port)
	judge := func(b []byte) int { return verdict(ctx, engine, b, 1) }

	if judge(fromClient) != nfqueue.NfAccept {
		t.Fatal("with no policy, a connection between Pods must be accepted")
	}
	policies := client.NetworkingV1().NetworkPolicies("canary")
	if _, err := policies.Create(ctx, denyIngress(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deny-all to be enforced", func() bool { return judge(fromClient) == nfqueue.NfDrop })
	if _, err := policies.Create(ctx, allowFromClient(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "allow-client to be enforced", func() bool { return judge(fromClient) == nfqueue.NfAccept })
	if judge(fromStranger) != nfqueue.NfDrop {
		t.Fatal("a Pod no rule allows must still be dropped")
	}
	if judge(syn("10.99.0.9", serverIP, port)) != nfqueue.NfDrop {
		t.Fatal("an address no Pod holds must be dropped by a deny-all ingress policy")
	}
	for _, name := range []string{"deny-all", "allow-client"} {
		if err := policies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the policies to be gone", func() bool { return judge(fromStranger) == nfqueue.NfAccept })
	if judge([]byte{0x45, 0, 0}) != nfqueue.NfDrop {
		t.Fatal("a packet that does not parse must be dropped")
	}
}

// TestQueueOnABridge proves the whole packet path in the dev cluster's topology: a bridge
// with two veth'd "Pod" namespaces, the host rules sunk dev installs (dev/src/sunk_dev/
// netpol.py, on bridge h13br0), and this program's queue reader. It changes network
// namespaces, so it runs only as root, inside a private one, when asked:
//
//	sudo SUNK_NETPOL_NETNS_TEST=1 unshare -n go test -run TestQueueOnABridge -v .
func TestQueueOnABridge(t *testing.T) {
	if os.Getenv("SUNK_NETPOL_NETNS_TEST") != "1" || os.Geteuid() != 0 {
		t.Skip("needs root in a private network namespace: SUNK_NETPOL_NETNS_TEST=1 unshare -n go test")
	}
	const bridge, queue = "h13br0", 117
	nss := map[string]string{"h13-np-srv": serverIP, "h13-np-cli": clientIP}
	sh(t, "ip", "link", "set", "lo", "up")
	sh(t, "ip", "link", "add", bridge, "type", "bridge")
	sh(t, "ip", "link", "set", bridge, "up")
	i := 0
	for ns, addr := range nss {
		i++
		veth := "h13v" + string(rune('0'+i))
		exec.Command("ip", "netns", "del", ns).Run()
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		sh(t, "ip", "link", "set", veth, "master", bridge, "up")
		sh(t, "ip", "-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	if err := os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("1\n"), 0o644); err != nil {
		t.Fatalf("br_netfilter: %v", err)
	}
	server := exec.Command("ip", "netns", "exec", "h13-np-srv", "python3", "-c",
		"import socket\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"+
			"s.bind(('"+serverIP+"', 5000)); s.listen()\nwhile True: s.accept()[0].close()")
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	connects := func() bool {
		return exec.Command("ip", "netns", "exec", "h13-np-cli", "python3", "-c",
			"import socket; socket.create_connection(('"+serverIP+"', 5000), timeout=1.5).close()").Run() == nil
	}
	eventually(t, "the server to listen", connects)

	// The rules, as sunk dev installs them (netpol.rules in dev/src/sunk_dev/netpol.py).
	sh(t, "iptables", "-w", "-N", "SUNK-NETPOL")
	sh(t, "iptables", "-w", "-A", "SUNK-NETPOL", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN")
	sh(t, "iptables", "-w", "-A", "SUNK-NETPOL", "-m", "conntrack", "--ctstate", "NEW", "-j", "NFQUEUE", "--queue-num", "117")
	sh(t, "iptables", "-w", "-I", "FORWARD", "1", "-i", bridge, "-j", "SUNK-NETPOL")
	if connects() {
		t.Fatal("with the rules and no reader, a new connection must not pass (fail closed)")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engine, client := cluster(t, ctx)
	readerCtx, stopReader := context.WithCancel(ctx)
	nf, err := openQueue(readerCtx, engine, queue)
	if err != nil {
		t.Fatal(err)
	}
	if !connects() {
		t.Fatal("with no policy the enforcer must let the connection through")
	}
	policies := client.NetworkingV1().NetworkPolicies("canary")
	if _, err := policies.Create(ctx, denyIngress(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	denied := syn(clientIP, serverIP, port)
	eventually(t, "the informer to hold the policy", func() bool { return verdict(ctx, engine, denied, 1) == nfqueue.NfDrop })
	if connects() {
		t.Fatal("a deny-all ingress policy must refuse the connection")
	}
	if err := policies.Delete(ctx, "deny-all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the informer to drop the policy", func() bool { return verdict(ctx, engine, denied, 1) == nfqueue.NfAccept })
	if !connects() {
		t.Fatal("once the policy is deleted the connection must pass again")
	}
	stopReader()
	nf.Close()
	if connects() {
		t.Fatal("once the enforcer stops reading, new connections must be dropped")
	}
	t.Logf("allowed, refused under deny-all, allowed again, refused with no reader")
}

func sh(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}
