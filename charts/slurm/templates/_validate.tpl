{{/*
Values that would render a Slurm that cannot work are refused at render time, with what to
change. Included once, from the Slurm configuration's template.
*/}}
{{- define "slurm.validate" -}}
{{- $s := .Values.slurm -}}
{{- if not $s.partitions -}}
{{- fail "slurm.partitions is empty: declare at least one partition (name, default, options)" -}}
{{- end -}}
{{- $seen := dict -}}
{{- $defaults := 0 -}}
{{- range $s.partitions -}}
{{- $p := . -}}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9_-]*$" (toString .name)) -}}
{{- fail (printf "slurm.partitions: %q is not a usable partition name (letters, digits, _ and -, starting with a letter or digit)" (toString .name)) -}}
{{- end -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "slurm.partitions declares %s twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- if .default }}{{ $defaults = add1 $defaults }}{{ end -}}
{{- range $key, $_ := .options -}}
{{- if has (lower $key) (list "partitionname" "nodes" "state" "default") -}}
{{- fail (printf "slurm.partitions[%s].options.%s is set by the chart (nodes join by NodeSet, default by `default: true`)" $p.name $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt $defaults 1 -}}
{{- fail "slurm.partitions: more than one partition says default: true; Slurm has one default partition" -}}
{{- end -}}
{{- range $key, $_ := $s.extraConf -}}
{{- if has (lower $key) (list "partitionname" "nodename" "nodeset" "prolog" "epilog") -}}
{{- fail (printf "slurm.extraConf.%s: partitions are declared in slurm.partitions and nodes come from NodeSets, so the pre-upgrade check and the operator know them; scripts go in slurm.prolog and slurm.epilog" $key) -}}
{{- end -}}
{{- if eq (lower $key) "metricstype" -}}
{{- fail (printf "slurm.extraConf.%s: Slurm's metrics are switched by metrics.slurmctld.enabled, which also tells the operator and the ServiceMonitor" $key) -}}
{{- end -}}
{{- end -}}
{{- with $s.topology -}}
{{- if and .plugin (not (has .plugin (list "tree" "block"))) -}}
{{- fail (printf "slurm.topology.plugin is %q: use tree, block, or \"\" for none" .plugin) -}}
{{- end -}}
{{- if and .plugin (not .labels) -}}
{{- fail "slurm.topology.labels is empty: name the Node labels that describe the network (tree: leaf first; block: one)" -}}
{{- end -}}
{{- if and (eq .plugin "block") (ne (len .labels) 1) -}}
{{- fail "slurm.topology.labels: block takes exactly one label (the block a Node belongs to)" -}}
{{- end -}}
{{- range .labels -}}
{{- if not (regexMatch "^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" (toString .)) -}}
{{- fail (printf "slurm.topology.labels: %q is not a Kubernetes label key" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $kind := list "prolog" "epilog" -}}
{{- range $name, $_ := index $s $kind -}}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9_.-]*$" $name) -}}
{{- fail (printf "slurm.%s.%s: script names may hold letters, digits, '.', '_' and '-'" $kind $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range .Values.nodeSets -}}
{{- $set := . -}}
{{- range .partitions -}}
{{- if not (hasKey $seen .) -}}
{{- fail (printf "nodeSets[%s] joins partition %s, which slurm.partitions does not declare" $set.name .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.accounting.enabled .Values.accounting.database.host (not .Values.accounting.database.passwordSecret.name) -}}
{{- fail "accounting.database.host names an external database: set accounting.database.passwordSecret.name to the Secret holding its password" -}}
{{- end -}}
{{- if .Values.accounting.enabled -}}
{{- $missing := list -}}
{{- range (list "associations" "limits" "qos" "safe") -}}
{{- if not (has . (default list $.Values.accounting.enforce)) -}}
{{- $missing = append $missing . -}}
{{- end -}}
{{- end -}}
{{- if and $missing (not .Values.accounting.acknowledgeWeakerEnforce) -}}
{{- fail (printf "accounting.enforce leaves out %s: Slurm would then take any account string and skip QoS and association limits; set accounting.acknowledgeWeakerEnforce=true to mean it" (join ", " $missing)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.accounting.fromDirectory -}}{{- if .enabled -}}
{{- if not $.Values.accounting.enabled -}}
{{- fail "accounting.fromDirectory.enabled needs accounting.enabled: the accounts live in slurmdbd" -}}
{{- end -}}
{{- if not $.Values.directory.uri -}}
{{- fail "accounting.fromDirectory.enabled needs directory.uri: accounts follow the directory's groups" -}}
{{- end -}}
{{- if not .groups -}}
{{- fail "accounting.fromDirectory.groups is empty: map at least one directory group to an account ({group: ml-team, account: ml})" -}}
{{- end -}}
{{- $groups := dict -}}
{{- range $i, $g := .groups -}}
{{- if or (not $g.group) (not $g.account) -}}
{{- fail (printf "accounting.fromDirectory.groups[%d] needs both group and account" $i) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9_.-]{0,63}$" (toString $g.account)) -}}
{{- fail (printf "accounting.fromDirectory.groups[%d].account %q: Slurm account names are lower-case letters, digits, '_', '.' and '-'" $i (toString $g.account)) -}}
{{- end -}}
{{- if hasKey $groups (toString $g.group) -}}
{{- fail (printf "accounting.fromDirectory.groups maps group %s twice" $g.group) -}}
{{- end -}}
{{- $_ := set $groups (toString $g.group) true -}}
{{- if and $g.defaultQos (not (has $g.defaultQos (default list $g.qos))) -}}
{{- fail (printf "accounting.fromDirectory.groups[%d].defaultQos %s is not in its qos list %v" $i $g.defaultQos (default list $g.qos)) -}}
{{- end -}}
{{- end -}}
{{- end -}}{{- end -}}
{{- if .Values.scheduler.enabled -}}
{{- $want := printf "%ds" (int $s.killWait) -}}
{{- if ne $want (toString .Values.scheduler.scheduler.killWait) -}}
{{- fail (printf "scheduler.scheduler.killWait (%v) must equal Slurm's KillWait, slurm.killWait (%v s): set it to %s" .Values.scheduler.scheduler.killWait $s.killWait $want) -}}
{{- end -}}
{{- $api := .Values.scheduler.scheduler.slurm -}}
{{- $https := hasPrefix "https://" (tpl (toString $api.apiBase) $) -}}
{{- $ca := tpl (toString (($api.caSecret | default dict).name | default "")) $ -}}
{{- if .Values.restapi.tls.enabled -}}
{{- if not $https -}}
{{- fail "scheduler.scheduler.slurm.apiBase must be an https URL while restapi.tls.enabled is true: slurmrestd answers only over TLS" -}}
{{- end -}}
{{- if ne $ca (include "slurm.restapiTLSSecret" .) -}}
{{- fail (printf "scheduler.scheduler.slurm.caSecret.name must be %s, the Secret of slurmrestd's certificate (restapi.tls.secret), so the scheduler can verify it" (include "slurm.restapiTLSSecret" .)) -}}
{{- end -}}
{{- else if or $https $ca -}}
{{- fail "restapi.tls.enabled is false: set scheduler.scheduler.slurm.apiBase to an http URL and scheduler.scheduler.slurm.caSecret.name to \"\"" -}}
{{- end -}}
{{- end -}}
{{- include "slurm.validateMetrics" . -}}
{{- include "slurm.validateHealthChecks" . -}}
{{- end -}}
