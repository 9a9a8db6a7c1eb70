{{/*
slurm.healthChecks.nodeConditions: Node condition types that name a fault when their status
is "True" (Node Problem Detector's). The operator drains a member whose Node has one, with
the reason "sunk-node: <Type>: <message>", and returns it when the condition clears
(sunk.operator.nodeset.node_faults). Comma-joined for --node-conditions; values the operator would
refuse fail the render here, naming the value.
*/}}
{{- define "slurm.nodeConditions" -}}
{{- $kinds := .Values.slurm.healthChecks.nodeConditions -}}
{{- if not (kindIs "slice" (default list $kinds)) -}}
{{- fail "slurm.healthChecks.nodeConditions must be a list of Node condition types (KernelDeadlock, ReadonlyFilesystem...)" -}}
{{- end -}}
{{- range $kinds -}}
{{- $k := toString . -}}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9_./-]*$" $k) -}}
{{- fail (printf "slurm.healthChecks.nodeConditions: %q is not a Node condition type (letters, digits and . _ - /)" $k) -}}
{{- end -}}
{{- if has $k (list "Ready" "SlurmHealthCheck") -}}
{{- fail (printf "slurm.healthChecks.nodeConditions: %q is not a fault: Ready is True on a well Node, and SlurmHealthCheck is the operator's own mirror of a check's drain" $k) -}}
{{- end -}}
{{- end -}}
{{- join "," (default list $kinds) -}}
{{- end -}}
