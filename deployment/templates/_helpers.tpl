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

{{/* The API server is read for pod UIDs and labels, and for DRA ResourceSlices. */}}
{{- define "dcgm-exporter.readsApi" -}}
{{- if or (and (or .Values.kubernetes.enablePodLabels .Values.kubernetes.enablePodUID .Values.usageAccounting.enabled) .Values.kubernetes.rbac.create) .Values.kubernetesDRA.enabled -}}true{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the YAML configuration (config.*). */}}
{{- define "dcgm-exporter.configName" -}}
{{- .Values.config.name | default (printf "%s-config" (include "dcgm-exporter.fullname" .)) -}}
{{- end }}
