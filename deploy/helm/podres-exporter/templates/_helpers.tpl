{{/*
Helpers shared by both agents. Object names are fixed (podres-exporter, podres-device-plugin),
as in the kustomize manifests: the alert rules match the jobs by those names, and one release
per cluster is all the node ports (9842, 9843) allow.
*/}}

{{/* Labels on every object and pod template. Selectors hold only name and component. */}}
{{- define "podres.labels" -}}
app.kubernetes.io/part-of: podres-exporter
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The image, tag defaulting to the chart's appVersion. */}}
{{- define "podres.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.registry -}}
{{ printf "%s/%s:%s" .Values.image.registry .Values.image.repository $tag }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository $tag }}
{{- end -}}
{{- end }}

{{/* The kubelet's root directory (absolute: values.schema.json), without a trailing slash. */}}
{{- define "podres.kubeletRootDir" -}}
{{- trimSuffix "/" .Values.kubeletRootDir -}}
{{- end }}

{{/*
The checkov checks each DaemonSet skips, with the reason. On the pod network (networkPolicy)
the host network's two (CKV_K8S_19, CKV2_K8S_6) no longer apply.
*/}}
{{- define "podres.checkovSkips" -}}
{{- $root := index . 0 -}}
{{- $why := index . 1 -}}
{{- if not $root.Values.networkPolicy.enabled }}
checkov.io/skip1: CKV_K8S_19=host network - scraped on the node address like node_exporter
{{- end }}
checkov.io/skip2: CKV_K8S_23=root - {{ $why }}
checkov.io/skip3: CKV_K8S_40=root - {{ $why }}
checkov.io/skip4: CKV_K8S_15=IfNotPresent - release tags are immutable; no registry at restart
checkov.io/skip5: CKV_K8S_43=tag not digest - a release is pinned by its tag (image.tag)
{{- if not $root.Values.networkPolicy.enabled }}
checkov.io/skip6: CKV2_K8S_6=host network - a NetworkPolicy does not apply to hostNetwork pods
{{- end }}
{{- end }}

{{/* The pod's network: the node's, or the pod network with networkPolicy. */}}
{{- define "podres.network" -}}
{{- if .Values.networkPolicy.enabled }}
hostNetwork: false
dnsPolicy: ClusterFirst
{{- else }}
# Scraped on the node's address, like node_exporter: a Prometheus outside the pod network can
# reach it, and `instance` names the node.
hostNetwork: true
# With the host network, this keeps cluster DNS names resolving.
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end }}

{{/* Root, but with no capabilities: the kubelet's sockets are root's in 0750 directories. */}}
{{- define "podres.podSecurityContext" -}}
runAsUser: 0
runAsGroup: 0
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "podres.containerSecurityContext" -}}
runAsUser: 0
runAsGroup: 0
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Alive: the process runs. Ready: the agent's first reading or registration is done. */}}
{{- define "podres.probes" -}}
{{- range $probe, $path := dict "livenessProbe" "/healthz" "readinessProbe" "/readyz" }}
{{ $probe }}:
  httpGet:
    path: {{ $path }}
    port: metrics
    {{- if and $.Values.webConfig.secretName $.Values.webConfig.tls }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}
{{- end }}

{{/* The node's name from the downward API (`podres top` inside the pod reads it). */}}
{{- define "podres.nodeNameEnv" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}

{{/* NVML in the container through the NVIDIA runtime: every GPU, for telemetry only. */}}
{{- define "podres.nvmlEnv" -}}
- name: NVIDIA_VISIBLE_DEVICES
  value: all
- name: NVIDIA_DRIVER_CAPABILITIES
  value: utility
{{- end }}

{{/* The web-config flag, mount and volume (a directory, never a subPath, so that updates of
the Secret reach the file). */}}
{{- define "podres.webConfigArg" -}}
- --web.config.file=/etc/podres-web/web-config.yml
{{- end }}

{{- define "podres.webConfigMount" -}}
- name: web-config
  mountPath: /etc/podres-web
  readOnly: true
{{- end }}

{{- define "podres.webConfigVolume" -}}
- name: web-config
  secret:
    secretName: {{ .Values.webConfig.secretName }}
    # 0400 (octal), written in decimal: readable by the agent (root) alone.
    defaultMode: 256
{{- end }}

{{/* A TOML value: a quoted string, a bool, or a number. */}}
{{- define "podres.tomlValue" -}}
{{- if kindIs "string" . -}}
{{ toJson . }}
{{- else if kindIs "bool" . -}}
{{ ternary "true" "false" . }}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{ int64 . }}
{{- else -}}
{{ fail (printf "devicePlugin: %v is not a string, boolean or integer" .) }}
{{- end -}}
{{- end }}

{{/* A TOML key: bare when it can be, else quoted. */}}
{{- define "podres.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}
{{ . }}
{{- else -}}
{{ toJson . }}
{{- end -}}
{{- end }}

{{/* A table's scalar keys, then its map-valued keys as sub-tables of `prefix`. */}}
{{- define "podres.tomlTable" -}}
{{- $prefix := index . 0 -}}
{{- $table := index . 1 -}}
{{- range $key := keys $table | sortAlpha }}
{{- $value := get $table $key }}
{{- if not (kindIs "map" $value) }}
{{ include "podres.tomlKey" $key }} = {{ include "podres.tomlValue" $value }}
{{- end }}
{{- end }}
{{- range $key := keys $table | sortAlpha }}
{{- $value := get $table $key }}
{{- if kindIs "map" $value }}
{{- $name := printf "%s.%s" $prefix (include "podres.tomlKey" $key) }}
[{{ $name }}]
{{- include "podres.tomlTable" (list $name $value) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The plugin's resource file: devicePlugin.resources as it stands (a string), or rendered. */}}
{{- define "podres.pluginToml" -}}
{{- $resources := .Values.devicePlugin.resources -}}
{{- if kindIs "string" $resources -}}
{{ $resources }}
{{- else -}}
# Rendered by the podres-exporter chart from devicePlugin.resources (format: docs/plugin.md).
{{- with .Values.devicePlugin.settings }}
[plugin]
{{- include "podres.tomlTable" (list "plugin" .) }}
{{- end }}
{{- range $resources }}

[[resource]]
{{- include "podres.tomlTable" (list "resource" .) }}
{{- end }}
{{ end -}}
{{- end }}

{{/*
A monitor's endpoint: the `metrics` port; the exporter's namespace, pod and container labels
(the workloads') win over the scrape's; `node` from the pod's node; the Operator's own
namespace, pod and container target labels (the agent's) dropped. The argument, merged in:
interval, scheme, tlsConfig, basicAuth, ...
*/}}
{{- define "podres.endpoint" -}}
{{- $endpoint := dict
  "port" "metrics"
  "honorLabels" true
  "relabelings" (list
    (dict "action" "replace" "sourceLabels" (list "__meta_kubernetes_pod_node_name") "targetLabel" "node")
    (dict "action" "labeldrop" "regex" "namespace|pod|container"))
-}}
{{- toYaml (merge (deepCopy (. | default dict)) $endpoint) }}
{{- end }}
