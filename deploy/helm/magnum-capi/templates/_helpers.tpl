{{/* Names, labels and the service's configuration file, shared by every template. */}}

{{- define "magnum-capi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's name when it already says magnum-capi, else "<release>-magnum-capi". */}}
{{- define "magnum-capi.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "magnum-capi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "magnum-capi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "magnum-capi.labels" -}}
{{ include "magnum-capi.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The pods of the Deployment (the API replicas). */}}
{{- define "magnum-capi.podLabels" -}}
{{ include "magnum-capi.selectorLabels" . }}
app.kubernetes.io/component: api
{{- end }}

{{/* `magnum-capi api-proxy`'s objects (docs/private-clusters.md). */}}
{{- define "magnum-capi.apiProxyName" -}}
{{- printf "%s-api-proxy" (include "magnum-capi.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "magnum-capi.apiProxyLabels" -}}
{{ include "magnum-capi.selectorLabels" . }}
app.kubernetes.io/component: api-proxy
{{- end }}

{{- define "magnum-capi.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The ClusterRole each cluster's autoscaler is bound to ([capi] autoscaler_cluster_role). */}}
{{- define "magnum-capi.autoscalerRole" -}}
{{- printf "%s-cluster-autoscaler" (include "magnum-capi.fullname" .) }}
{{- end }}

{{/* Where the pod finds its files. */}}
{{- define "magnum-capi.configDir" -}}/etc/magnum-capi{{- end }}
{{- define "magnum-capi.sealKeyFile" -}}/etc/magnum-capi/seal-keys/keys{{- end }}
{{- define "magnum-capi.kubeconfigDir" -}}/etc/magnum-capi/kubeconfigs{{- end }}
{{- define "magnum-capi.tlsDir" -}}/etc/magnum-capi/tls{{- end }}

{{/* Whether the service talks to the management cluster with a kubeconfig (not in-cluster). */}}
{{- define "magnum-capi.hasKubeconfigs" -}}
{{- if or .Values.managementCluster.kubeconfig .Values.managementCluster.existingSecret .Values.managementClusters }}true{{- end }}
{{- end }}

{{/*
magnum-capi.toml: what the chart decides (files it mounts, no migrations at start, Keystone,
management clusters), then `config` from the values over it. Secrets are not in it: the
database URL and the Keystone password come from Secrets as environment variables.
*/}}
{{- define "magnum-capi.config" -}}
{{- $ks := .Values.keystone }}
{{- $keystone := dict "auth_url" (required "keystone.authUrl is required" $ks.authUrl) "user_domain_name" $ks.userDomainName "project_domain_name" $ks.projectDomainName "interface" $ks.interface }}
{{- if $ks.applicationCredentialId }}
{{- $_ := set $keystone "application_credential_id" $ks.applicationCredentialId }}
{{- else }}
{{- $_ := set $keystone "username" $ks.username }}
{{- $_ := set $keystone "project_name" $ks.projectName }}
{{- end }}
{{- with $ks.regionName }}{{ $_ := set $keystone "region_name" . }}{{ end }}
{{- with $ks.wwwAuthenticateUri }}{{ $_ := set $keystone "www_authenticate_uri" . }}{{ end }}
{{- with $ks.cafile }}{{ $_ := set $keystone "cafile" . }}{{ end }}
{{- $capi := dict "autoscaler_cluster_role" (include "magnum-capi.autoscalerRole" .) }}
{{- $dir := include "magnum-capi.kubeconfigDir" . }}
{{- if or .Values.managementCluster.kubeconfig .Values.managementCluster.existingSecret }}
{{- $_ := set $capi "kubeconfig" (printf "%s/default" $dir) }}
{{- end }}
{{- $named := list }}
{{- range .Values.managementClusters }}
{{- $entry := merge (dict "name" .name "kubeconfig" (printf "%s/%s" $dir .name)) (default (dict) .config) }}
{{- $named = append $named $entry }}
{{- end }}
{{- if $named }}{{ $_ := set $capi "management_clusters" $named }}{{ end }}
{{- if .Values.apiProxy.enabled }}
{{- $_ := set $capi "api_proxy_url" (printf "http://%s.%s.svc:%v" (include "magnum-capi.apiProxyName" .) .Release.Namespace .Values.apiProxy.port) }}
{{- end }}
{{- $cfg := dict
  "database" (dict "migrate_on_start" false)
  "operations" (dict "seal_key_file" (include "magnum-capi.sealKeyFile" .))
  "keystone" $keystone
  "capi" $capi
  "log" (dict "format" "json") }}
{{- /* Values reach templates as JSON numbers (float64), which toToml writes as `8.0`; the
service's integer settings need `8`. No setting of the service is a float. */}}
{{- regexReplaceAll "(?m)^(\\s*[a-z_]+ = -?[0-9]+)\\.0$" (toToml (mergeOverwrite $cfg (deepCopy .Values.config))) "${1}" }}
{{- end }}

{{/* Whether a named management cluster's kubeconfig is given inline. */}}
{{- define "magnum-capi.inlineNamed" -}}
{{- range .Values.managementClusters }}{{ if .kubeconfig }}true{{ end }}{{ end }}
{{- end }}
