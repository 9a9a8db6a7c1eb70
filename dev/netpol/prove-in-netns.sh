#!/usr/bin/env bash
# Proves sunk-netpol end to end without a dev cluster: a private etcd and kube-apiserver, the
# built sunk-netpol with a user granted only what sunk dev grants it, the host rules from
# sunk_dev.netpol, and a bridge with two veth'd "Pod" namespaces, all in a private network
# namespace (nothing on the host is touched). Needs root and hack/build-tools.sh's etcd,
# kube-apiserver, kubectl and sunk-netpol. Usage, from the repository root:
#
#     sudo unshare -n dev/netpol/prove-in-netns.sh
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${SUNK_CACHE:-$HOME/.cache/sunk}/bin
D=$(mktemp -d /tmp/sunk-netpol-proof.XXXXXX)
PY=$REPO/.venv/bin/python
FAILED=0
NS=${NS_PREFIX:-sunk-netpol-$$}  # the two `ip netns` names start with this
check() { if "${@:2}"; then echo "PASS $1"; else echo "FAIL $1"; FAILED=1; fi; }
refused() { ! connects; }
PIDS=()
cleanup() {
  set +e
  (cd "$REPO" && $PY -c "from sunk_dev import netpol; netpol.remove_rules('np0br')")
  for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done
  ip netns del $NS-srv 2>/dev/null; ip netns del $NS-cli 2>/dev/null
  wait 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
ip link set lo up
$BIN/etcd --data-dir $D/etcd --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 >$D/etcd.log 2>&1 & PIDS+=($!)
openssl genrsa -out $D/sa.key 2048 2>/dev/null
printf 'admintok,admin,1,system:masters\nnetpoltok,system:sunk-netpol,2\n' >$D/tokens.csv
$BIN/kube-apiserver --etcd-servers=http://127.0.0.1:2379 --cert-dir=$D/certs --secure-port=6443 --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
  --token-auth-file=$D/tokens.csv --authorization-mode=RBAC --service-account-issuer=https://sunk-netpol-proof \
  --service-account-key-file=$D/sa.key --service-account-signing-key-file=$D/sa.key \
  --service-cluster-ip-range=10.96.0.0/16 --enable-priority-and-fairness=false >$D/api.log 2>&1 & PIDS+=($!)
kc() { # $1 user token file
  cat >$2 <<K
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: $1}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
K
}
kc admintok $D/admin.kubeconfig; kc netpoltok $D/netpol.kubeconfig
K="$BIN/kubectl --kubeconfig=$D/admin.kubeconfig"
for i in $(seq 120); do $K get --raw /readyz >/dev/null 2>&1 && break; sleep 1; done
$K get --raw /readyz; echo " API server ready"
# The same grant netpol.apply_rbac makes (RBAC_RULES): list/watch on pods, namespaces, networkpolicies.
$K create clusterrole sunk-dev:netpol --verb=list,watch --resource=pods,namespaces,networkpolicies.networking.k8s.io
$K create clusterrolebinding sunk-dev:netpol --clusterrole=sunk-dev:netpol --user=system:sunk-netpol
$K create namespace canary; $K -n canary create serviceaccount default
for p in srv:10.99.0.2 cli:10.99.0.3; do
  name=${p%%:*} ip=${p##*:}
  $K -n canary run $name --image=none --restart=Never --labels=app=$name --overrides='{"spec":{"nodeName":"real-1"}}'
  $K -n canary patch pod $name --subresource=status --type=merge \
    -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$ip\",\"podIPs\":[{\"ip\":\"$ip\"}]}}" >/dev/null
done
$K -n canary get pods -o wide
# The topology: bridge np0br with two veth'd namespaces.
ip link add np0br type bridge; ip link set np0br up
n=0
for p in $NS-srv:10.99.0.2 $NS-cli:10.99.0.3; do
  ns=${p%%:*} ip=${p##*:}; n=$((n+1))
  ip netns add $ns
  ip link add npv$n type veth peer name eth0 netns $ns
  ip link set npv$n master np0br up
  ip -n $ns addr add $ip/24 dev eth0; ip -n $ns link set eth0 up; ip -n $ns link set lo up
done
echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
ip netns exec $NS-srv python3 -m http.server 8080 --bind 10.99.0.2 >$D/http.log 2>&1 & PIDS+=($!)
connects() { ip netns exec $NS-cli python3 -c "import socket; socket.create_connection(('10.99.0.2', 8080), timeout=2).close()" 2>/dev/null; }
timing() { # the mean time to open (and close) a connection, over 200
  ip netns exec $NS-cli python3 -c "
import socket, time
t = time.perf_counter()
for _ in range(200): socket.create_connection(('10.99.0.2', 8080), timeout=2).close()
print(f'{(time.perf_counter() - t) / 200 * 1e3:.2f} ms per connection $1')"
}
for i in $(seq 50); do connects && break; sleep 0.2; done
check "no rules: connects" connects
# The real enforcer, with the least-privileged user, then the rules from sunk_dev.netpol.
$BIN/sunk-netpol --kubeconfig=$D/netpol.kubeconfig --queue-num=100 --ready-file=$D/ready --v=1 >$D/netpol.log 2>&1 & NP=$!; PIDS+=($NP)
for i in $(seq 300); do [ -e $D/ready ] && break; sleep 0.1; done
check "sunk-netpol says it reads the queue" test -e $D/ready
(cd "$REPO" && $PY -c "
from sunk_dev import netpol; netpol.install_rules('np0br'); print(*netpol.rules_in_place('np0br'), sep='\n')")
check "enforced, no policy: connects" connects
$K -n canary apply -f - <<P
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all}
spec: {podSelector: {}, policyTypes: [Ingress]}
P
for i in $(seq 20); do connects || break; done
check "deny-all ingress: refused" refused
$K -n canary delete networkpolicy deny-all
for i in $(seq 20); do connects && break; done
check "deny-all deleted: connects again" connects
# egress too: deny egress of cli only
$K -n canary apply -f - <<P
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: cli-no-egress}
spec: {podSelector: {matchLabels: {app: cli}}, policyTypes: [Egress]}
P
for i in $(seq 20); do connects || break; done
check "no egress for the client: refused" refused
$K -n canary delete networkpolicy cli-no-egress
for i in $(seq 20); do connects && break; done
timing "through sunk-netpol"
kill $NP; wait $NP 2>/dev/null || true
check "enforcer stopped, rules in place: refused (fails closed)" refused
grep -c dropped $D/netpol.log | sed 's/^/dropped lines in netpol.log: /'
tail -3 $D/netpol.log
(cd "$REPO" && $PY -c "from sunk_dev import netpol; netpol.remove_rules('np0br'); print('after remove_rules:', netpol.rules_in_place('np0br'))")
check "rules removed: connects" connects
timing "without the rules"
exit $FAILED
