{{/*
Non-empty ("missing: <Secret>/<key> ...") when the hooks-secret Job (templates/secret.yaml)
has work: a Secret it makes is not in the cluster or lacks the key its Job requires of one
that exists. Empty when both are there, and the Job would only have found them. `lookup`
reads nothing under `helm template`, `--dry-run` and GitOps renders: the Job is then
rendered, as it always was. Helm waits on each hook Job's Pod in turn, so a Job with
nothing to do costs every upgrade seconds (issue #55).
*/}}
{{- define "sunk.hooksSecretsMissing" -}}
{{- $owned := dict -}}
{{- if not .Values.scheduler.hooks.secretName }}{{ $_ := set $owned (include "sunk.hooksSecret" .) "secret" }}{{ end -}}
{{- if not .Values.scheduler.hooks.tls.secretName }}{{ $_ := set $owned (include "sunk.hooksTLSSecret" .) "tls.crt" }}{{ end -}}
{{- $namespace := .Release.Namespace -}}
{{- range $name, $key := $owned -}}
{{- $data := (lookup "v1" "Secret" $namespace $name).data | default dict -}}
{{- if not (get $data $key) }}missing: {{ $name }}/{{ $key }} {{ end -}}
{{- end -}}
{{- end -}}
