{{/*
The data of the Slurm configuration ConfigMap: slurm.conf, cgroup.conf, gres.conf and the
prolog/epilog scripts, made from the values. The live ConfigMap and the pre-upgrade check's
copy of the proposed configuration both use it, so the check reads exactly what would be
applied.
*/}}
{{- define "slurm.configData" -}}
{{- $f := include "slurm.fullname" . }}
{{- $s := .Values.slurm }}
{{- $c := $s.confinement }}
{{- if not (has $c.cgroupVersion (list "auto" "v1" "v2")) }}
{{- fail (printf "slurm.confinement.cgroupVersion is %q: use auto, v1 or v2" $c.cgroupVersion) }}
{{- end }}
{{- /* Every line the chart sets, by key; slurm.extraConf may add keys but not replace these. */}}
{{- $conf := dict
  "ClusterName" (include "slurm.clusterName" .)
  "SlurmctldHost" (printf "%s-controller-0(%s)" $f (include "slurm.controllerHost" .))
  "SlurmctldPort" "6817"
  "SlurmdPort" "6818"
  "SlurmUser" "slurm"
  "SlurmdUser" "root"
  "AuthType" "auth/slurm"
  "CredType" "cred/slurm"
  "AuthAltTypes" "auth/jwt"
  "AuthAltParameters" "jwt_key=/etc/slurm/jwt_hs256.key"
  "SlurmctldParameters" (join "," (prepend $s.slurmctldParameters "enable_configless"))
  "StateSaveLocation" "/var/spool/slurmctld"
  "SlurmdSpoolDir" "/var/spool/slurmd"
  "SlurmctldPidFile" "/run/slurm/slurmctld.pid"
  "SlurmdPidFile" "/run/slurm/slurmd.pid"
  "SlurmctldDebug" $s.debugLevel
  "SlurmdDebug" $s.debugLevel
  "ProctrackType" ($s.proctrackType | default (ternary "proctrack/cgroup" "proctrack/linuxproc" $c.enabled))
  "TaskPlugin" ($s.taskPlugin | default (ternary "task/cgroup,task/affinity" "task/none" $c.enabled))
  "JobAcctGatherType" ($s.jobAcctGatherType | default (ternary "jobacct_gather/cgroup" "jobacct_gather/none" $c.enabled))
  "MpiDefault" "none"
  "SelectType" "select/cons_tres"
  "SelectTypeParameters" "CR_Core_Memory"
  "GresTypes" "gpu"
  "ReturnToService" "2"
  "MaxNodeCount" (toString (int $s.maxNodeCount))
  "KillWait" (toString (int $s.killWait))
  "MailProg" "/bin/true"
}}
{{- /* Slurm's counter wraps before MaxJobId, and root or SlurmUser may ask for any ID
above it: the IDs from there up are the scheduler's own (scheduler.scheduler.jobIdRange). */}}
{{- $idRange := toString (dig "scheduler" "jobIdRange" "50000000-67108863" (.Values.scheduler | default dict)) }}
{{- if ne $idRange "shared" }}
{{- $_ := set $conf "MaxJobId" (first (splitList "-" $idRange)) }}
{{- end }}
{{- if .Values.accounting.enabled }}
{{- $_ := set $conf "AccountingStorageType" "accounting_storage/slurmdbd" }}
{{- $_ := set $conf "AccountingStorageHost" (printf "%s-accounting.%s.svc.%s" $f .Release.Namespace .Values.clusterDomain) }}
{{- $_ := set $conf "AccountingStoragePort" "6819" }}
{{- $_ := set $conf "AccountingStorageTRES" "gres/gpu" }}
{{- with .Values.accounting.enforce }}
{{- $_ := set $conf "AccountingStorageEnforce" (join "," .) }}
{{- end }}
{{- end }}
{{- $jobNamespaces := include "slurm.jobNamespaces" . }}
{{- if eq $jobNamespaces "namespace/linux" }}
{{- /* Slurm 25.11+: namespace.yaml below; Slurm refuses it without the extern step Contain makes. */}}
{{- $_ := set $conf "NamespaceType" "namespace/linux" }}
{{- $_ := set $conf "PrologFlags" "Contain" }}
{{- else if $jobNamespaces }}
{{- /* Slurm refuses job_container/tmpfs without the extern step Contain makes. */}}
{{- $_ := set $conf "JobContainerType" "job_container/tmpfs" }}
{{- $_ := set $conf "PrologFlags" "Contain" }}
{{- end }}
{{- if $s.topology.plugin }}
{{- $_ := set $conf "TopologyPlugin" (printf "topology/%s" $s.topology.plugin) }}
{{- end }}
{{- if include "slurm.slurmctldMetrics" . }}
{{- /* Slurm's own metrics on slurmctld's port (25.11+): metrics.slurmctld. */}}
{{- $_ := set $conf "MetricsType" "metrics/openmetrics" }}
{{- end }}
{{- if $s.healthChecks.enabled }}
{{- /* sunk's checks (templates/_health_checks.tpl): slurmd runs the mounted runner. */}}
{{- $_ := set $conf "HealthCheckProgram" (include "slurm.healthCheckProgram" .) }}
{{- $_ := set $conf "HealthCheckInterval" (include "slurm.healthCheckInterval" .) }}
{{- $_ := set $conf "HealthCheckNodeState" (upper (nospace (toString $s.healthChecks.nodeState))) }}
{{- end }}
{{- range $key, $value := $s.extraConf }}
{{- if hasKey $conf $key }}
{{- fail (printf "slurm.extraConf.%s is set by the chart already; use its own value in slurm (see values.yaml) or leave it" $key) }}
{{- end }}
{{- end }}
slurm.conf: |
  # Made by the slurm chart from its values: change the values, not this file.
  {{- range $key := keys $conf | sortAlpha }}
  {{ $key }}={{ index $conf $key }}
  {{- end }}
  {{- range $key, $value := $s.extraConf }}
  {{ $key }}={{ $value }}
  {{- end }}
  {{- if or $s.prolog $s.epilog }}
  # One line per script, named without a directory: slurmctld then hands the scripts
  # to every slurmd along with the configuration.
  {{- end }}
  {{- range $kind := list "prolog" "epilog" }}
  {{- range $name, $_ := index $s $kind }}
  {{ title $kind }}={{ $kind }}-{{ $name }}
  {{- end }}
  {{- end }}
  # Partitions, each with the node set of the nodes that registered with its feature:
  # the operator gives every slurmd Pod the feature part_<partition> of each partition
  # its NodeSet lists, so a new NodeSet never needs a change here.
  {{- range $s.partitions }}
  NodeSet=part_{{ .name }} Feature=part_{{ .name }}
  PartitionName={{ .name }} Nodes=part_{{ .name }} State=UP{{ if .default }} Default=YES{{ end }}{{ range $key, $value := .options }} {{ $key }}={{ $value }}{{ end }}
  {{- end }}
cgroup.conf: |
  {{- $s.cgroupConf | default (include "slurm.cgroupConf" .) | trim | nindent 2 }}
{{- if eq $jobNamespaces "namespace/linux" }}
namespace.yaml: |
  # Each job's /tmp and /dev/shm, made under slurmd's spool and removed when the job ends,
  # and a PID namespace of its own with its own /proc: a job sees only its own processes.
  defaults:
    auto_base_path: true
    base_path: /var/spool/slurmd/job-tmp
    dirs: /tmp,/dev/shm
    clone_ns_flags:
      - CLONE_NEWPID
{{- else if $jobNamespaces }}
job_container.conf: |
  # Each job's /tmp and /dev/shm, made under slurmd's spool and removed when the job ends.
  # (Slurm 24.11 has no PID namespace per job: jobs on one node see each other's processes.)
  AutoBasePath=true
  BasePath=/var/spool/slurmd/job-tmp
{{- end }}
{{- if $jobNamespaces }}
mpi.conf: |
  # PMIx's shared-memory store is made in slurmstepd's view of /tmp and /dev/shm, which a
  # job's private ones hide from its ranks (MPI_Init fails: PMIX_ERR_FILE_OPEN_FAILURE in
  # gds_shmem2); they read the job's data from PMIx's hash store instead.
  PMIxEnv=PMIX_MCA_gds=hash
{{- end }}
oci.conf: |
  {{- include "slurm.ociConf" . | trim | nindent 2 }}
gres.conf: |
  {{- $s.gresConf | trim | nindent 2 }}
{{- range $kind := list "prolog" "epilog" }}
{{- range $name, $script := index $s $kind }}
{{ $kind }}-{{ $name }}: |
  {{- $script | trim | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}


{{/*
The plugin that gives each job namespaces of its own, from slurm.confinement: "" (none:
confinement or privateTmp off), "job_container/tmpfs" (a private /tmp and /dev/shm; the only
one Slurm 24.11 has) or "namespace/linux" (the same, plus a PID namespace and its own /proc;
Slurm 25.11 and later). pidNamespace auto picks namespace/linux where both the controller's
and slurmd's image tags read as 25.11 or newer (<year>.<month>[anything], as
metrics.slurmctld.enabled reads them): a Slurm older than that stops at start on the
NamespaceType line, so a tag that does not read so (latest, digest only) keeps
job_container/tmpfs, which 25.11 and 26.05 still take under its old name.
*/}}
{{- define "slurm.jobNamespaces" -}}
{{- $c := .Values.slurm.confinement -}}
{{- $want := toString $c.pidNamespace -}}
{{- if not (has $want (list "auto" "true" "false")) -}}
{{- fail (printf "slurm.confinement.pidNamespace is %q: use auto (on from Slurm 25.11), true or false" $want) -}}
{{- end -}}
{{- if and (eq $want "true") (not (and $c.enabled $c.privateTmp)) -}}
{{- fail "slurm.confinement.pidNamespace=true needs slurm.confinement.enabled and privateTmp: Slurm's namespace/linux makes the PID namespace along with the private /tmp" -}}
{{- end -}}
{{- if and $c.enabled $c.privateTmp -}}
{{- $pid := eq $want "true" -}}
{{- if eq $want "auto" -}}
{{- $pid = and (include "slurm.tagFrom2511" .Values.controller.image.tag) (include "slurm.tagFrom2511" .Values.slurmd.image.tag) -}}
{{- end -}}
{{- ternary "namespace/linux" "job_container/tmpfs" (not (not $pid)) -}}
{{- end -}}
{{- end -}}

{{/* "true" when an image tag reads as Slurm 25.11 or newer (<year>.<month>[anything]), else "". */}}
{{- define "slurm.tagFrom2511" -}}
{{- $m := regexFindAll "[0-9]+" (regexFind "^v?[0-9]+\\.[0-9]+" (toString .)) -1 -}}
{{- if eq (len $m) 2 -}}
{{- $major := atoi (index $m 0) -}}
{{- $minor := atoi (index $m 1) -}}
{{- if or (gt $major 25) (and (eq $major 25) (ge $minor 11)) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}


{{/*
cgroup.conf from slurm.confinement: every constraint on, no swap beyond the memory asked for.
slurmd runs without systemd in its container, so it makes its cgroups itself (IgnoreSystemd)
and, on cgroup v2, enables the controllers it needs (EnableControllers).
*/}}
{{- define "slurm.cgroupConf" -}}
{{- $c := .Values.slurm.confinement }}
{{- if not $c.enabled }}
CgroupPlugin=disabled
{{- else }}
# Made by the slurm chart from slurm.confinement.
CgroupPlugin={{ get (dict "auto" "autodetect" "v1" "cgroup/v1" "v2" "cgroup/v2") $c.cgroupVersion }}
{{- if ne $c.cgroupVersion "v1" }}
IgnoreSystemd=yes
EnableControllers=yes
{{- end }}
ConstrainCores=yes
ConstrainRAMSpace=yes
AllowedRAMSpace=100
ConstrainSwapSpace=yes
AllowedSwapSpace=0
ConstrainDevices=yes
{{- end }}
{{- end -}}


{{/*
oci.conf from slurm.containers. Slurm hands the --container string, the step's environment
(a file) and its command to sunk-step-container in the slurmd image, which fetches and runs
the image (IgnoreFileConfigJson: no bundle is read from disk first). With containers off,
the same hook refuses the step: without any oci.conf, Slurm would run it outside the image.
*/}}
{{- define "slurm.ociConf" -}}
{{- $c := .Values.slurm.containers }}
{{- $runtime := "/usr/local/bin/sunk-step-container" }}
# Made by the slurm chart from slurm.containers.
IgnoreFileConfigJson=true
CreateEnvFile=null
{{- if $c.enabled }}
{{- $flags := list (printf "--cache-max-gib %v" $c.cacheMaxGiB) }}
{{- range (include "slurm.sharedVolumes" $ | fromJsonArray) }}
{{- $flags = append $flags (printf "--allow-mount %s" .path) }}
{{- end }}
{{- range $c.allowedMounts }}
{{- if not (regexMatch "^/[A-Za-z0-9._/-]*$" .) }}
{{- fail (printf "slurm.containers.allowedMounts: %q must be an absolute path of letters, digits and . _ - /" .) }}
{{- end }}
{{- $flags = append $flags (printf "--allow-mount %s" .) }}
{{- end }}
{{- range $c.insecureRegistries }}
{{- if not (regexMatch "^[A-Za-z0-9.-]+(:[0-9]+)?$" .) }}
{{- fail (printf "slurm.containers.insecureRegistries: %q must be host or host:port" .) }}
{{- end }}
{{- $flags = append $flags (printf "--insecure-registry %s" .) }}
{{- end }}
RunTimeRun="if [ -x {{ $runtime }} ]; then exec {{ $runtime }} {{ join " " $flags }} run --container '%r' --env-file %e --spool %m --name sunk-%j.%s.%t-%n -- %@; else echo 'sunk: this node cannot run containers: its slurmd image has no {{ $runtime }}' >&2; exit 125; fi"
{{- else }}
RunTimeRun="echo 'sunk: containers in job steps are off on this cluster (slurm.containers.enabled=false)' >&2; exit 125"
{{- end }}
{{- end -}}
