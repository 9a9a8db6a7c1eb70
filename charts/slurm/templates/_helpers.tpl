{{/*
F: the prefix of every object's name. 40 characters leave room for the longest suffix
("-controller-0" and the StatefulSet's revision label stay within Kubernetes' 63).
*/}}
{{- define "slurm.fullname" -}}
{{- .Release.Name | trunc 40 -}}
{{- end -}}

{{- define "slurm.clusterName" -}}
{{- default (include "slurm.fullname" .) .Values.slurm.clusterName -}}
{{- end -}}

{{/* Where slurmctld answers: the StatefulSet Pod's own DNS name, and the Service's. */}}
{{- define "slurm.controllerHost" -}}
{{- $f := include "slurm.fullname" . -}}
{{- printf "%s-controller-0.%s-controller.%s.svc.%s" $f $f .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- /* Where the short host names of login and slurmd Pods resolve (templates/hosts.yaml). */}}
{{- define "slurm.hostsDomain" -}}
{{- printf "%s-hosts.%s.svc.%s" (include "slurm.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "slurm.confServer" -}}
{{- printf "%s-controller.%s.svc.%s:6817" (include "slurm.fullname" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "slurm.restapiURL" -}}
{{- printf "%s://%s-restapi:6820" (ternary "https" "http" .Values.restapi.tls.enabled) (include "slurm.fullname" .) -}}
{{- end -}}

{{/* The Secret with slurmrestd's certificate and its CA (ca.crt); blank with TLS off. */}}
{{- define "slurm.restapiTLSSecret" -}}
{{- if .Values.restapi.tls.enabled -}}
{{- default (printf "%s-restapi-tls" (include "slurm.fullname" .)) .Values.restapi.tls.secret -}}
{{- end -}}
{{- end -}}

{{/*
What a client of slurmrestd in this chart adds, with TLS on, to trust its certificate:
call with (list "args" $), (list "mount" $) or (list "volume" $), indented by the caller.
*/}}
{{- define "slurm.restapiCA" -}}
{{- $part := index . 0 }}{{ $root := index . 1 -}}
{{- with include "slurm.restapiTLSSecret" $root -}}
{{- if eq $part "args" -}}
- --slurm-ca-file=/etc/sunk/slurmrestd-ca/ca.crt
{{- else if eq $part "mount" -}}
- {name: slurmrestd-ca, mountPath: /etc/sunk/slurmrestd-ca, readOnly: true}
{{- else -}}
- name: slurmrestd-ca
  secret: {secretName: {{ . }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; call with (list "component-name" $). */}}
{{- define "slurm.labels" -}}
{{- $root := index . 1 -}}
{{ include "slurm.selector" . }}
app.kubernetes.io/part-of: slurm
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ $root.Chart.Name }}-{{ $root.Chart.Version }}
{{- end -}}

{{/* What a component's Pods are selected by; call with (list "component-name" $). */}}
{{- define "slurm.selector" -}}
app.kubernetes.io/name: {{ index . 0 }}
app.kubernetes.io/instance: {{ (index . 1).Release.Name }}
{{- end -}}

{{/* image and imagePullPolicy of a container; call with (list .Values.x.image $). */}}
{{- define "slurm.image" -}}
{{- $image := index . 0 -}}
image: {{ include "slurm.imageRef" . | quote }}
imagePullPolicy: {{ $image.pullPolicy }}
{{- end -}}

{{/*
The slurmd images NodeSets may name beside any tag of slurmd.image's repository, as a JSON
list: slurmd.allowedImages and the images of the nodeSets value (issue #52).
*/}}
{{- define "slurm.allowedSlurmdImages" -}}
{{- $found := list -}}
{{- range .Values.slurmd.allowedImages }}{{ $found = append $found (toString .) }}{{ end -}}
{{- range .Values.nodeSets }}{{ with .image }}{{ $found = append $found (toString .) }}{{ end }}{{ end -}}
{{- $found | uniq | toJson -}}
{{- end -}}

{{/*
An image reference: repository:tag, and @digest when the values pin one (then the
registry must serve exactly that image, whatever the tag now points at).
Call with (list .Values.component.image $).
*/}}
{{- define "slurm.imageRef" -}}
{{- $image := index . 0 -}}
{{- $ref := printf "%s:%s" $image.repository ($image.tag | default (index . 1).Chart.AppVersion) -}}
{{- with $image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "image digest %q of %s is not sha256:<64 hex digits>" . $image.repository) -}}
{{- end -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/*
Pod-level settings every component shares: pull secrets, and where it may run (its own
nodeSelector, tolerations and affinity, or the chart-wide defaults when it sets none).
Call with (list .Values.component $).
*/}}
{{- define "slurm.podPlacement" -}}
{{- $c := index . 0 -}}
{{- $root := index . 1 -}}
{{- $d := $root.Values.defaults -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.nodeSelector | default $d.nodeSelector) }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.tolerations | default $d.tolerations) }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.affinity | default $d.affinity) }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Hook annotations; call with (list "pre-install,pre-upgrade" weight "delete policy"). */}}
{{- define "slurm.hook" -}}
helm.sh/hook: {{ index . 0 }}
helm.sh/hook-weight: {{ index . 1 | quote }}
helm.sh/hook-delete-policy: {{ index . 2 }}
{{- end -}}

{{/* The partitions the values declare, comma-separated (the pre-upgrade check keeps them). */}}
{{- define "slurm.partitionNames" -}}
{{- $names := list -}}
{{- range .Values.slurm.partitions }}{{ $names = append $names .name }}{{ end -}}
{{- join "," $names -}}
{{- end -}}

{{/* The in-cluster MariaDB runs when accounting is on and no external host is named. */}}
{{- define "slurm.inClusterDatabase" -}}
{{- if and .Values.accounting.enabled (not .Values.accounting.database.host) }}true{{ end -}}
{{- end -}}

{{/* The Secret holding the database password, and whether the hook Job makes it. */}}
{{- define "slurm.databaseSecret" -}}
{{- default (printf "%s-mariadb" (include "slurm.fullname" .)) .Values.accounting.database.passwordSecret.name -}}
{{- end -}}

{{- define "slurm.makesDatabaseSecret" -}}
{{- if and (include "slurm.inClusterDatabase" .) (not .Values.accounting.database.passwordSecret.name) }}true{{ end -}}
{{- end -}}

{{/*
The shared volumes, checked, as a list of dicts with claim, path and readOnly. A bad entry
fails the install naming it.
*/}}
{{- define "slurm.sharedVolumes" -}}
{{- $f := include "slurm.fullname" . }}
{{- $out := list }}
{{- $paths := dict }}
{{- range $i, $v := .Values.sharedVolumes }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $v.name)) }}
{{- fail (printf "sharedVolumes[%d].name %q must be a lower-case DNS label" $i (toString $v.name)) }}
{{- end }}
{{- if or (not (regexMatch "^/[A-Za-z0-9._/-]*$" (toString $v.mountPath))) (eq (toString $v.mountPath) "/") (contains "/../" (printf "%s/" $v.mountPath)) }}
{{- fail (printf "sharedVolumes[%d].mountPath %q must be an absolute directory (letters, digits, . _ - /), not /" $i (toString $v.mountPath)) }}
{{- end }}
{{- if hasKey $paths (toString $v.mountPath) }}
{{- fail (printf "sharedVolumes: two volumes are mounted at %s" $v.mountPath) }}
{{- end }}
{{- $_ := set $paths (toString $v.mountPath) true }}
{{- $out = append $out (dict "name" $v.name "claim" ($v.claimName | default (printf "%s-%s" $f $v.name)) "path" $v.mountPath "readOnly" (default false $v.readOnly) "make" (not $v.claimName) "size" ($v.size | default "10Gi") "storageClassName" ($v.storageClassName | default "")) }}
{{- end }}
{{- toJson $out }}
{{- end -}}

{{/*
The shared volume mounted at /home, which holds people's homes: "rw" (the login Pods make
each person's home on it), "ro" (homes are made elsewhere) or "" (none: homes are on each
login Pod's own disk and do not follow people).
*/}}
{{- define "slurm.sharedHome" -}}
{{- range (include "slurm.sharedVolumes" . | fromJsonArray) }}
{{- if eq .path "/home" }}{{ ternary "ro" "rw" .readOnly }}{{ end }}
{{- end }}
{{- end -}}

{{/*
The services and start-up scripts of one component ("slurmd" or "login"), checked, as the
data of its ConfigMap (JSON; {} when there are none). A name must be a short lower-case word
that makes a file name, unique within its list, and a service may not take the name of the
container's own daemon.
*/}}
{{- define "slurm.services" -}}
{{- $component := index . 0 -}}
{{- $v := index (index . 1).Values $component -}}
{{- $data := dict -}}
{{- range $kind := list "services" "startupScripts" -}}
{{- $prefix := ternary "service" "startup" (eq $kind "services") -}}
{{- range $i, $entry := (get $v $kind | default list) -}}
{{- $where := printf "%s.%s[%d]" $component $kind $i -}}
{{- if not (kindIs "map" $entry) -}}
{{- fail (printf "%s must be {name, run}, not %v" $where $entry) -}}
{{- end -}}
{{- $name := toString ($entry.name | default "") -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $name) -}}
{{- fail (printf "%s.name is %q: use lower-case letters, digits and -, as in node-exporter" $where $name) -}}
{{- end -}}
{{- if and (eq $kind "services") (has $name (list $component "nslcd" "people-status" "homes")) -}}
{{- fail (printf "%s.name is %q, the name of one of the container's own services: choose another" $where $name) -}}
{{- end -}}
{{- if not $entry.run -}}
{{- fail (printf "%s (%s) has no run: the script that starts it" $where $name) -}}
{{- end -}}
{{- $key := printf "%s.%s" $prefix $name -}}
{{- if hasKey $data $key -}}
{{- fail (printf "%s.%s names %s twice" $component $kind $name) -}}
{{- end -}}
{{- $_ := set $data $key (toString $entry.run) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $component "login") $v.passwordLogin -}}
{{- /* the chart's own: nslcd, which sshd's PAM asks to check directory passwords */ -}}
{{- $_ := set $data "service.nslcd" "exec /usr/local/sbin/sunk-nslcd\n" -}}
{{- end -}}
{{- if and (eq $component "login") (index . 1).Values.directory.uri (eq (include "slurm.sharedHome" (index . 1)) "rw") -}}
{{- /* the chart's own: the people's homes on the shared /home (files/homes.sh) */ -}}
{{- $_ := set $data "service.homes" "exec /bin/sh /etc/sunk/homes/homes.sh /home /var/lib/extrausers/passwd /run/sunk-homes\n" -}}
{{- end -}}
{{- toJson $data -}}
{{- end -}}
