{{/*
Hook Jobs that have work only sometimes are rendered only then (issue #55: Helm waits on
each hook's Pod in turn, several seconds apiece, before an upgrade changes anything). Each
decides on what `lookup` reads from the live cluster. `lookup` reads nothing under
`helm template`, `--dry-run` without `=server` and GitOps renders, and nothing exists yet
on a first install: each rule below then renders its Job, so when in doubt the Job runs,
as it always did.
*/}}

{{/*
The Secrets templates/secrets-job.yaml makes: name → the keys its Job requires of one that
exists (sunk.operator.chart.secrets: it fails on an existing Secret without them).
*/}}
{{- define "slurm.ownedSecrets" -}}
{{- $f := include "slurm.fullname" . -}}
{{- $owned := dict (printf "%s-auth" $f) (list "slurm.key" "jwt_hs256.key") (printf "%s-scheduler-token" $f) (list "token") -}}
{{- if include "slurm.makesDatabaseSecret" . }}{{ $_ := set $owned (include "slurm.databaseSecret" .) (list "password") }}{{ end -}}
{{- if and .Values.login.enabled (not .Values.login.hostKeysSecret) }}{{ $_ := set $owned (printf "%s-login-host-keys" $f) (list "ssh_host_ed25519_key" "ssh_host_ed25519_key.pub") }}{{ end -}}
{{- if and .Values.restapi.tls.enabled (not .Values.restapi.tls.secret) }}{{ $_ := set $owned (include "slurm.restapiTLSSecret" .) (list "tls.crt") }}{{ end -}}
{{- toJson $owned -}}
{{- end -}}

{{/*
Non-empty ("missing: <Secret>/<key> ...") when the secrets Job has work: a Secret it makes is
not in the cluster or lacks a key. Empty when every one is there, and the Job would only
have found them and left them alone.
*/}}
{{- define "slurm.secretsMissing" -}}
{{- $namespace := .Release.Namespace -}}
{{- range $name, $keys := include "slurm.ownedSecrets" . | fromJson -}}
{{- $data := (lookup "v1" "Secret" $namespace $name).data | default dict -}}
{{- range $keys }}{{ if not (get $data .) }}missing: {{ $name }}/{{ . }} {{ end }}{{ end -}}
{{- end -}}
{{- end -}}

{{/*
Non-empty (why) when the pre-upgrade check (templates/partition-check-job.yaml) has work:
the live ConfigMap's configuration as `lookup` reads it, against the new one.
*/}}
{{- define "slurm.partitionCheckNeeded" -}}
{{- $live := lookup "v1" "ConfigMap" .Release.Namespace (printf "%s-slurm-config" (include "slurm.fullname" .)) -}}
{{- include "slurm.configChangeNeedsCheck" (list . ($live.data | default dict)) -}}
{{- end -}}

{{/*
The rule, apart from `lookup` so that tests can hand it a live configuration: (list root
liveData). The check is skipped only when the live configuration is the new one less the
partitions the upgrade adds, and every option of an added partition is one the chart vouches
for (slurm.unvouchedOptions). Such an upgrade drops no partition, so it strands no job (the
`check` container's question), and the only lines it adds are the chart's own NodeSet= and
PartitionName= lines for names and options the chart has validated, which Slurm's parser
(the `parse` container) accepts. Anything else is checked: a partition dropped, renamed,
reordered or changed, an added one with another option or value, extraConf, cgroup.conf, a
new chart's lines, or no live configuration to compare.
*/}}
{{- define "slurm.configChangeNeedsCheck" -}}
{{- $root := index . 0 -}}
{{- $live := index . 1 -}}
{{- if not $live -}}
no live configuration to compare with
{{- else -}}
{{- /* The partitions the live slurm.conf declares, and the values' own entries for them. */ -}}
{{- $declared := list -}}
{{- range regexFindAll "(?m)^PartitionName=\\S+" (get $live "slurm.conf" | toString) -1 -}}
{{- $declared = append $declared (trimPrefix "PartitionName=" .) -}}
{{- end -}}
{{- $kept := list -}}
{{- $optioned := list -}}
{{- range $root.Values.slurm.partitions -}}
{{- if has .name $declared -}}
{{- $kept = append $kept . -}}
{{- else -}}
{{- $unvouched := include "slurm.unvouchedOptions" (.options | default dict) -}}
{{- if $unvouched }}{{ $optioned = append $optioned (printf "%s (%s)" .name $unvouched) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- /* The new configuration as it would be without the added partitions. */ -}}
{{- $slurm := set (omit $root.Values.slurm "partitions") "partitions" $kept -}}
{{- $values := set (omit $root.Values "slurm") "slurm" $slurm -}}
{{- $ctx := dict "Values" $values "Release" $root.Release "Chart" $root.Chart "Files" $root.Files "Capabilities" $root.Capabilities "Template" $root.Template -}}
{{- $changed := list -}}
{{- range $key, $text := include "slurm.configData" $ctx | fromYaml -}}
{{- if ne (trim (toString $text)) (trim (toString (get $live $key))) }}{{ $changed = append $changed $key }}{{ end -}}
{{- end -}}
{{- if $changed -}}
changed beyond added partitions: {{ join ", " $changed }}
{{- else if $optioned -}}
added partitions with options the chart cannot vouch for: {{ join ", " $optioned }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The options of a partition (a dict) that the chart cannot vouch for, as "Key=value" joined
by ", ", or "" when it vouches for all of them: the keys below with a value of the shape
Slurm's parser accepts for them (tests/chart/test_partition_options.py hands each shape's
examples, and near misses, to Slurm's own parser on 24.11 and 26.05). A partition added
with only such options needs no pre-upgrade check: Slurm cannot refuse its line. Keys are
matched as Slurm matches them, without regard to case.
*/}}
{{- define "slurm.unvouchedOptions" -}}
{{- $time := "^((?i:infinite|unlimited)|[0-9]+(:[0-9]{1,2}){0,2}|[0-9]+-[0-9]{1,2}(:[0-9]{1,2}){0,2})$" -}}
{{- $tier := "^([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-3])$" -}}
{{- $count := "^([0-9]{1,9}|(?i:infinite|unlimited))$" -}}
{{- $yesno := "^(?i:yes|no)$" -}}
{{- $names := "^[A-Za-z0-9_][A-Za-z0-9_.-]*(,[A-Za-z0-9_][A-Za-z0-9_.-]*)*$" -}}
{{- $shapes := dict
  "maxtime" $time "defaulttime" $time
  "prioritytier" $tier "priorityjobfactor" $tier
  "maxnodes" $count "maxcpuspernode" "^([0-9]{1,9}|(?i:unlimited))$" "gracetime" "^[0-9]{1,9}$"
  "oversubscribe" "^(?i:no|exclusive|(yes|force)(:[0-9]{1,4})?)$"
  "exclusiveuser" $yesno "hidden" $yesno "rootonly" $yesno "reqresv" $yesno "lln" $yesno
  "allowaccounts" $names "allowgroups" $names "allowqos" $names "denyaccounts" $names "denyqos" $names
-}}
{{- $unvouched := list -}}
{{- range $key, $value := . -}}
{{- $shape := get $shapes (lower $key) -}}
{{- if not (and $shape (regexMatch $shape (toString $value))) -}}
{{- $unvouched = append $unvouched (printf "%s=%v" $key $value) -}}
{{- end -}}
{{- end -}}
{{- join ", " $unvouched -}}
{{- end -}}
