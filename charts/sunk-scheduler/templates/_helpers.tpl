{{- define "sunk.fullname" -}}
{{- printf "%s-sunk-scheduler" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sunk.schedulerName" -}}
{{- default (printf "%s-%s" .Release.Namespace .Release.Name) .Values.scheduler.name -}}
{{- end -}}

{{/* The namespaces whose Pods the scheduler handles; empty list = every namespace (but the
key namespaces, see sunk.keyNamespaces). Tenants who may create Pods in the release's namespace
could mount its keys (slurm.key, the JWT key, the scheduler's token), so namespace scope must
name the tenants' namespaces and never the release's or slurmd's. */}}
{{- define "sunk.watchNamespaces" -}}
{{- if eq .Values.scheduler.scope.type "cluster" -}}
{{- else -}}
{{- $list := list -}}
{{- range (splitList "," .Values.scheduler.scope.namespaces) -}}
{{- if trim . }}{{- $list = append $list (trim .) -}}{{- end -}}
{{- end -}}
{{- if not $list -}}
{{- fail "scheduler.scope.namespaces is required: the comma-separated namespaces whose Pods the scheduler places (tenants' namespaces, never the release's own, which holds the keys; in the slurm chart: scheduler.scheduler.scope.namespaces)" -}}
{{- end -}}
{{- range (splitList "," (include "sunk.keyNamespaces" .)) -}}
{{- if has . $list -}}
{{- fail (printf "scheduler.scope.namespaces must not include %s: it holds the cluster's keys, and whoever may create Pods there can mount them (give tenants namespaces of their own)" .) -}}
{{- end -}}
{{- end -}}
{{- join "," $list -}}
{{- end -}}
{{- end -}}

{{/* The namespaces holding keys (the release's, slurmd's): never the scheduler's to place
Pods in, whatever the scope. */}}
{{- define "sunk.keyNamespaces" -}}
{{- join "," (uniq (list .Release.Namespace (include "sunk.slurmdNamespace" .))) -}}
{{- end -}}

{{/* Values that name a parent chart's objects may hold templates ({{ .Release.Name }}). */}}
{{- define "sunk.slurmdNamespace" -}}
{{- default .Release.Namespace (tpl .Values.scheduler.slurmd.namespace .) -}}
{{- end -}}

{{- define "sunk.hooksTLSSecret" -}}
{{- default (printf "%s-hooks-tls" (include "sunk.fullname" .)) .Values.scheduler.hooks.tls.secretName -}}
{{- end -}}

{{- define "sunk.hooksSecret" -}}
{{- default (printf "%s-hooks" (include "sunk.fullname" .)) .Values.scheduler.hooks.secretName -}}
{{- end -}}

{{- define "sunk.labels" -}}
app.kubernetes.io/name: sunk-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "sunk.selector" -}}
app.kubernetes.io/name: sunk-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* What the scheduler may do to Pods it schedules. */}}
{{- define "sunk.podRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [""]
  resources: [pods/binding]
  verbs: [create]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create]
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [get]
{{- end -}}

{{/* The scheduler's image: repository:tag, and @digest when the values pin one. */}}
{{- define "sunk.image" -}}
{{- $image := .Values.scheduler.image -}}
{{- $ref := printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- with $image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "scheduler.image.digest %q is not sha256:<64 hex digits>" .) -}}
{{- end -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* The trust policy's keys that grant root (0) or anything ("*"): what needs
scheduler.policy.acknowledgeUnbounded. The scheduler refuses such a file without it too. */}}
{{- define "sunk.policyUnbounded" -}}
{{- $p := .Values.scheduler.policy -}}
{{- $all := dict "default" (default dict $p.default) -}}
{{- range $name, $rules := (default dict $p.namespaces) -}}
{{- $_ := set $all (printf "namespaces.%s" $name) (default dict $rules) -}}
{{- end -}}
{{- $found := list -}}
{{- range $where, $rules := $all -}}
{{- range $key := list "uids" "gids" -}}
{{- range (default list (get $rules $key)) -}}
{{- if has (toString .) (list "0" "*") -}}
{{- $found = append $found (printf "scheduler.policy.%s.%s" $where $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $key := list "defaultUid" "defaultGid" -}}
{{- if and (hasKey $rules $key) (eq (toString (get $rules $key)) "0") -}}
{{- $found = append $found (printf "scheduler.policy.%s.%s" $where $key) -}}
{{- end -}}
{{- end -}}
{{- range $key := list "accounts" "partitions" "qos" "reservations" "annotations" -}}
{{- if has "*" (default list (get $rules $key)) -}}
{{- $found = append $found (printf "scheduler.policy.%s.%s" $where $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join ", " (uniq $found) -}}
{{- end -}}
