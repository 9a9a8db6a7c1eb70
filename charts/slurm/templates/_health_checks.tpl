{{/*
Node health checks (slurm.healthChecks): slurmd runs files/health-check.sh as its
HealthCheckProgram. The script is not one Slurm ships to configless slurmd (only Prolog and
Epilog scripts travel with the configuration), so it reaches every member in the ConfigMap
<fullname>-health-checks, which the operator mounts at the path below; the operator's own
scripts (scripts.configMap) are mounted beside it.
*/}}
{{- define "slurm.healthCheckProgram" -}}/etc/sunk/health-checks/run{{- end -}}
{{- define "slurm.healthCheckScriptsDir" -}}/etc/sunk/health-checks.d{{- end -}}

{{/* interval in seconds: a whole number, or one with s, m or h. */}}
{{- define "slurm.healthCheckInterval" -}}
{{- $v := toString .Values.slurm.healthChecks.interval -}}
{{- $m := regexFindAll "^([0-9]+)(s|m|h)?$" $v 1 -}}
{{- if not $m -}}
{{- fail (printf "slurm.healthChecks.interval is %q: give seconds (60), or a duration in s, m or h (60s, 5m)" $v) -}}
{{- end -}}
{{- $n := int (regexReplaceAll "[smh]$" $v "") -}}
{{- $n = mul $n (get (dict "s" 1 "m" 60 "h" 3600 "" 1) (regexReplaceAll "^[0-9]+" $v "")) -}}
{{- if or (lt $n 1) (gt $n 65535) -}}
{{- fail (printf "slurm.healthChecks.interval is %q: Slurm takes 1 to 65535 seconds" $v) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* replace.after in seconds: a whole number, or one with s, m or h; at least the interval. */}}
{{- define "slurm.healthCheckReplaceAfter" -}}
{{- $v := toString .Values.slurm.healthChecks.replace.after -}}
{{- if not (regexMatch "^[0-9]+(s|m|h)?$" $v) -}}
{{- fail (printf "slurm.healthChecks.replace.after is %q: give seconds (1800), or a duration in s, m or h (30m, 2h)" $v) -}}
{{- end -}}
{{- $n := int (regexReplaceAll "[smh]$" $v "") -}}
{{- $n = mul $n (get (dict "s" 1 "m" 60 "h" 3600 "" 1) (regexReplaceAll "^[0-9]+" $v "")) -}}
{{- $interval := include "slurm.healthCheckInterval" . | int -}}
{{- if lt $n $interval -}}
{{- fail (printf "slurm.healthChecks.replace.after is %q: give at least the interval (%d s), so the checks run again before a member is replaced" $v $interval) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* checks.nvidia.enabled as "auto", "true" or "false" (nvidia: false and nvidia: auto say the same). */}}
{{- define "slurm.healthCheckNvidia" -}}
{{- $v := .Values.slurm.healthChecks.checks.nvidia -}}
{{- $e := "auto" -}}
{{- if kindIs "map" $v -}}
{{- if hasKey $v "enabled" }}{{ $e = toString $v.enabled }}{{ end -}}
{{- else if not (kindIs "invalid" $v) -}}
{{- $e = toString $v -}}
{{- end -}}
{{- if not (has $e (list "auto" "true" "false")) -}}
{{- fail (printf "slurm.healthChecks.checks.nvidia.enabled is %q: give auto (where nvidia-smi is installed), true (required on GPU members) or false" $e) -}}
{{- end -}}
{{- $e -}}
{{- end -}}

{{/* checks.dcgm as its level ("1"), or "off" (dcgm: false says the same). */}}
{{- define "slurm.healthCheckDcgm" -}}
{{- $v := .Values.slurm.healthChecks.checks.dcgm -}}
{{- $e := "false" -}}
{{- $level := "1" -}}
{{- if kindIs "map" $v -}}
{{- if hasKey $v "enabled" }}{{ $e = toString $v.enabled }}{{ end -}}
{{- if hasKey $v "level" }}{{ $level = toString $v.level }}{{ end -}}
{{- else if not (kindIs "invalid" $v) -}}
{{- $e = toString $v -}}
{{- end -}}
{{- if not (has $e (list "true" "false")) -}}
{{- fail (printf "slurm.healthChecks.checks.dcgm.enabled is %q: give true or false" $e) -}}
{{- end -}}
{{- if ne $level "1" -}}
{{- fail (printf "slurm.healthChecks.checks.dcgm.level is %q: only 1 (dcgmi diag -r 1, seconds) fits inside slurmd's 60 s health check run; run longer levels as Slurm jobs" $level) -}}
{{- end -}}
{{- ternary $level "off" (eq $e "true") -}}
{{- end -}}

{{/*
What the runner reads (shell assignments, sourced): only values checked here reach it, so
no quoting can break out. Its budget for all checks together is 34 s: with at most 7 s for
each of its two scontrol calls, a run ends by 48 s, inside slurmd's 60 s kill.
*/}}
{{- define "slurm.healthCheckSettings" -}}
{{- $h := .Values.slurm.healthChecks -}}
{{- $c := $h.checks -}}
{{- $checks := list -}}
{{- range $name := list "cpus" "memory" "gpus" -}}
{{- if index $c $name }}{{ $checks = append $checks $name }}{{ end -}}
{{- end -}}
{{- $nvidia := include "slurm.healthCheckNvidia" . -}}
{{- if ne $nvidia "false" }}{{ $checks = append $checks "nvidia" }}{{ end -}}
{{- $dcgm := include "slurm.healthCheckDcgm" . -}}
{{- if ne $dcgm "off" }}{{ $checks = append $checks "dcgm" }}{{ end -}}
{{- if $c.mounts }}{{ $checks = append $checks "mounts" }}{{ end -}}
{{- if gt (int $c.spool.minFreeMiB) 0 }}{{ $checks = append $checks "spool" }}{{ end -}}
# Made by the slurm chart from slurm.healthChecks.
checks='{{ join " " $checks }}'
timeout_s='{{ int $h.timeoutSeconds }}'
budget_s='34'
scontrol_s='5'
mounts='{{ join " " (default list $c.mounts) }}'
spool_min_mib='{{ int $c.spool.minFreeMiB }}'
nvidia_smi='{{ ternary "required" "auto" (eq $nvidia "true") }}'
dcgm_level='{{ ternary 1 $dcgm (eq $dcgm "off") }}'
{{- with $h.scripts.configMap }}
scripts_dir='{{ include "slurm.healthCheckScriptsDir" $ }}'
scripts_configmap='{{ . }}'
{{- end }}
{{- end -}}

{{/* Values that would give a runner that cannot work, refused with the value's name. */}}
{{- define "slurm.validateHealthChecks" -}}
{{- $h := .Values.slurm.healthChecks -}}
{{- if $h.enabled -}}
{{- $_ := include "slurm.healthCheckInterval" . -}}
{{- $t := toString $h.timeoutSeconds -}}
{{- if not (regexMatch "^[0-9]+$" $t) -}}
{{- fail (printf "slurm.healthChecks.timeoutSeconds is %q: give whole seconds (10)" $t) -}}
{{- end -}}
{{- if or (lt (int $t) 1) (gt (int $t) 30) -}}
{{- fail (printf "slurm.healthChecks.timeoutSeconds is %s: give 1 to 30 seconds; slurmd kills the whole run at 60 s, and the checks share 34 s of it" $t) -}}
{{- end -}}
{{- $states := list "ANY" "ALLOC" "CYCLE" "IDLE" "MIXED" "NONDRAINED_IDLE" -}}
{{- $given := list -}}
{{- range (splitList "," (toString $h.nodeState)) -}}
{{- if not (has (upper (trim .)) $states) -}}
{{- fail (printf "slurm.healthChecks.nodeState: %q is not one of %s (comma-separated, e.g. ANY,CYCLE)" . (join ", " $states)) -}}
{{- end -}}
{{- $given = append $given (upper (trim .)) -}}
{{- end -}}
{{- /* slurmctld runs the checks on an idle drained node only for ANY or IDLE, and only a
run there lifts a drain the checks set once its jobs have ended. */ -}}
{{- if not (or (has "ANY" $given) (has "IDLE" $given)) -}}
{{- fail (printf "slurm.healthChecks.nodeState is %q: include ANY or IDLE, or a node the checks drained would never run them again to be returned" (toString $h.nodeState)) -}}
{{- end -}}
{{- $c := $h.checks -}}
{{- if not (kindIs "slice" (default list $c.mounts)) -}}
{{- fail "slurm.healthChecks.checks.mounts must be a list of absolute paths" -}}
{{- end -}}
{{- range $c.mounts -}}
{{- if not (regexMatch "^/[A-Za-z0-9._/-]*$" (toString .)) -}}
{{- fail (printf "slurm.healthChecks.checks.mounts: %q must be an absolute path of letters, digits and . _ - /" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- $_ = include "slurm.healthCheckNvidia" . -}}
{{- $_ = include "slurm.healthCheckDcgm" . -}}
{{- if not (regexMatch "^[0-9]+$" (toString $c.spool.minFreeMiB)) -}}
{{- fail (printf "slurm.healthChecks.checks.spool.minFreeMiB is %q: give whole MiB (0: no spool check)" (toString $c.spool.minFreeMiB)) -}}
{{- end -}}
{{- $_ = include "slurm.healthCheckReplaceAfter" . -}}
{{- if not (regexMatch "^[0-9]+$" (toString $h.replace.maxUnavailable)) -}}
{{- fail (printf "slurm.healthChecks.replace.maxUnavailable is %q: give a whole number of members (0: never replace)" (toString $h.replace.maxUnavailable)) -}}
{{- end -}}
{{- with $h.scripts.configMap -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$" (toString .)) -}}
{{- fail (printf "slurm.healthChecks.scripts.configMap: %q is not a ConfigMap name" (toString .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
