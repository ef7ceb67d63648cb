{{/* Chart name, after nameOverride. */}}
{{- define "dcgm-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object name prefix: the release name, with the chart name unless it already contains it. */}}
{{- define "dcgm-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dcgm-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "dcgm-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dcgm-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ include "dcgm-exporter.name" . }}
{{- end -}}

{{- define "dcgm-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dcgm-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dcgm-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dcgm-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "dcgm-exporter.tlsSecretName" -}}
{{- if .Values.tlsServerConfig.existingSecret -}}
{{- tpl .Values.tlsServerConfig.existingSecret $ -}}
{{- else -}}
{{- printf "%s-tls" (include "dcgm-exporter.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "dcgm-exporter.webConfigName" -}}
{{- printf "%s-web-config.yml" (include "dcgm-exporter.fullname" .) -}}
{{- end -}}

{{/* A web config file is generated when HTTPS or basic authentication is asked for. */}}
{{- define "dcgm-exporter.webConfig" -}}
{{- if or .Values.tlsServerConfig.enabled .Values.basicAuth.users -}}true{{- end -}}
{{- end -}}

{{/* The ClusterRole to read pods (pod UIDs and labels, usage accounting) and DRA
ResourceSlices is made: NVIDIA's rule, with usage accounting. */}}
{{- define "dcgm-exporter.readsPods" -}}
{{- if or (and (or .Values.kubernetes.enablePodLabels .Values.kubernetes.enablePodUID .Values.usageAccounting.enabled) .Values.kubernetes.rbac.create) .Values.kubernetesDRA.enabled -}}true{{- end -}}
{{- end -}}

{{/* The ConfigMap `-m`/`--configmap-data` names ("<namespace>:<name>"): from `arguments`
(-m, --m, -configmap-data, --configmap-data, with the value after `=` or as the next
argument) or else from DCGM_EXPORTER_CONFIGMAP_DATA in extraEnv, as the binary reads them;
empty for none (or "none"). */}}
{{- define "dcgm-exporter.configMapData" -}}
{{- $found := "" -}}
{{- range .Values.extraEnv -}}
{{- if and (eq (toString .name) "DCGM_EXPORTER_CONFIGMAP_DATA") (hasKey . "value") -}}
{{- $found = toString .value -}}
{{- end -}}
{{- end -}}
{{- $args := .Values.arguments | default list -}}
{{- range $i, $a := $args -}}
{{- $s := toString $a -}}
{{- $body := trimPrefix "-" (trimPrefix "-" $s) -}}
{{- $flag := first (splitList "=" $body) -}}
{{- if and (hasPrefix "-" $s) (has $flag (list "m" "configmap-data")) -}}
{{- if contains "=" $body -}}
{{- $found = trimPrefix (printf "%s=" $flag) $body -}}
{{- else if lt (add1 $i) (len $args) -}}
{{- $found = toString (index $args (add1 $i)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if ne $found "none" -}}{{ $found }}{{- end -}}
{{- end -}}

{{/* The pod reads the API server: pods (pod UIDs and labels, usage accounting, whoever
makes the RBAC), DRA ResourceSlices, or the ConfigMap of `-m`. */}}
{{- define "dcgm-exporter.readsApi" -}}
{{- if or .Values.kubernetes.enablePodLabels .Values.kubernetes.enablePodUID .Values.usageAccounting.enabled .Values.kubernetesDRA.enabled (include "dcgm-exporter.configMapData" .) -}}true{{- end -}}
{{- end -}}

{{/* The service-account token is mounted (pod and ServiceAccount): as
serviceAccount.automountServiceAccountToken says, or, unset, when the pod reads the API. */}}
{{- define "dcgm-exporter.automountServiceAccountToken" -}}
{{- if kindIs "invalid" .Values.serviceAccount.automountServiceAccountToken -}}
{{- eq (include "dcgm-exporter.readsApi" .) "true" -}}
{{- else -}}
{{- .Values.serviceAccount.automountServiceAccountToken -}}
{{- end -}}
{{- end -}}

{{/* The namespace and name of the ConfigMap `-m` names when that is not the chart's
metric list ("<namespace>:<name>"), else empty. */}}
{{- define "dcgm-exporter.otherConfigMap" -}}
{{- $ref := splitList ":" (include "dcgm-exporter.configMapData" .) -}}
{{- if and (eq (len $ref) 2) (first $ref) (last $ref) -}}
{{- if not (and (eq (first $ref) (include "dcgm-exporter.namespace" .)) (eq (last $ref) "exporter-metrics-config-map")) -}}
{{- join ":" $ref -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A value as an environment variable's string; null is empty, as NVIDIA's "{{ . }}". */}}
{{- define "dcgm-exporter.envString" -}}
{{- if kindIs "invalid" . -}}""{{- else -}}{{ toString . | quote }}{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the YAML configuration (config.*). */}}
{{- define "dcgm-exporter.configName" -}}
{{- .Values.config.name | default (printf "%s-config" (include "dcgm-exporter.fullname" .)) -}}
{{- end }}
