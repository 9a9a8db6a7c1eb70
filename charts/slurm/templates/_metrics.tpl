{{/*
Prometheus: whether slurmctld serves its own metrics, the label selectors the alert rules
use, and the checks on metrics.* values. templates/metrics.yaml and templates/alerts.yaml
use these; docs/operations.md (Scraping, Alerts) explains them.
*/}}

{{/*
"true" when slurmctld serves Slurm's own metrics (MetricsType=metrics/openmetrics), else "".
metrics.slurmctld.enabled: true or false as said; auto: on for a controller image tag of
25.11 or newer (the first Slurm with the endpoint), read as <year>.<month>[anything]; a tag
that does not read so (latest, a digest-only image) leaves it off, since slurmctld stops at
start on a MetricsType it does not know.
*/}}
{{- define "slurm.slurmctldMetrics" -}}
{{- $want := toString .Values.metrics.slurmctld.enabled -}}
{{- if eq $want "true" -}}
true
{{- else if eq $want "auto" -}}
{{- $m := regexFindAll "[0-9]+" (regexFind "^v?[0-9]+\\.[0-9]+" (toString .Values.controller.image.tag)) -1 -}}
{{- if eq (len $m) 2 -}}
{{- $major := atoi (index $m 0) -}}
{{- $minor := atoi (index $m 1) -}}
{{- if or (gt $major 25) (and (eq $major 25) (ge $minor 11)) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* slurmctld's metric leaves: never /metrics itself (an index, not a scrape); the
per-user and per-account one only when asked (one series set per user: unbounded). */}}
{{- define "slurm.slurmctldMetricPaths" -}}
{{- $paths := list "/metrics/jobs" "/metrics/nodes" "/metrics/partitions" "/metrics/scheduler" -}}
{{- if .Values.metrics.slurmctld.perUser -}}
{{- $paths = append $paths "/metrics/jobs-users-accts" -}}
{{- end -}}
{{- toJson $paths -}}
{{- end -}}

{{/* A Prometheus duration (30s, 5m, 1h30m, 2d) in seconds. */}}
{{- define "slurm.durationSeconds" -}}
{{- $unit := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 "w" 604800.0 "y" 31536000.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+[a-z]+" (toString .) -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $total = addf $total (mulf (float64 $n) (get $unit (trimPrefix $n .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
metrics.* checked before anything renders: a threshold Prometheus could not read, or one that
makes no sense, fails the install with the value's name instead of a rule file Prometheus
refuses (or, worse, accepts and never fires).
*/}}
{{- define "slurm.validateMetrics" -}}
{{- $m := .Values.metrics -}}
{{- $duration := "^([0-9]+(ms|s|m|h|d|w|y))+$" -}}
{{- $number := "^[0-9]+(\\.[0-9]+)?$" -}}
{{- if not (has (toString $m.slurmctld.enabled) (list "auto" "true" "false")) -}}
{{- fail (printf "metrics.slurmctld.enabled is %q: use auto (on from Slurm 25.11), true or false" (toString $m.slurmctld.enabled)) -}}
{{- end -}}
{{- range $key := list "serviceMonitor.interval" "slurmctld.interval" -}}
{{- $v := toString (index (index $m (splitList "." $key | first)) (splitList "." $key | last)) -}}
{{- if not (regexMatch $duration $v) -}}
{{- fail (printf "metrics.%s is %q: a Prometheus duration such as 30s, 1m or 2m" $key $v) -}}
{{- end -}}
{{- end -}}
{{- if not (regexMatch "^https?://" (toString $m.rules.runbookBaseURL)) -}}
{{- fail (printf "metrics.rules.runbookBaseURL is %q: an http(s) URL of docs/operations.md (each alert links to its #anchor there)" (toString $m.rules.runbookBaseURL)) -}}
{{- end -}}
{{- range $alert, $settings := $m.rules.alerts -}}
{{- range $key, $value := $settings -}}
{{- $v := toString $value -}}
{{- if has $key (list "for" "after") -}}
{{- if not (regexMatch $duration $v) -}}
{{- fail (printf "metrics.rules.alerts.%s.%s is %q: a Prometheus duration such as 30s, 5m, 2h or 1d" $alert $key $v) -}}
{{- end -}}
{{- else if not (regexMatch $number $v) -}}
{{- fail (printf "metrics.rules.alerts.%s.%s is %q: a number, zero or more" $alert $key $v) -}}
{{- else if and (eq $key "percent") (gt (float64 $v) 100.0) -}}
{{- fail (printf "metrics.rules.alerts.%s.percent is %s: a share of a NodeSet, 0 to 100" $alert $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The alert rules (files/alerts.yaml with the values' thresholds): a list of rule groups. */}}
{{- define "slurm.alertGroups" -}}
{{- tpl (.Files.Get "files/alerts.yaml") . -}}
{{- end -}}
