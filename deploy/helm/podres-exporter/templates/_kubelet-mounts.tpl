{{/*
The exporter's opt-in kubelet mounts (kubelet.podsApi, kubelet.files), each read-only at the
path the exporter looks at inside the container (/var/lib/kubelet/...), from where the kubelet
keeps it on the node (under kubeletRootDir). Never created on a node: the types are
Directory and File, so a node without the path keeps the pod from starting there.
*/}}

{{/* "true" when the Pods API directory is mounted: kubelet.podsApi.enabled true, or "auto"
with an API server of 1.37 or later (the kubelets' own versions are not known here). */}}
{{- define "podres.podsApi" -}}
{{- $enabled := .Values.kubelet.podsApi.enabled -}}
{{- if eq (toString $enabled) "auto" -}}
{{- if semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version }}true{{ end -}}
{{- else if $enabled -}}
true
{{- end -}}
{{- end }}

{{/* The kubelet's --config file on the node. */}}
{{- define "podres.kubeletConfigPath" -}}
{{- .Values.kubelet.files.configPath | default (printf "%s/config.yaml" (include "podres.kubeletRootDir" .)) -}}
{{- end }}

{{- define "podres.kubeletAnnotations" -}}
{{- if include "podres.podsApi" . }}
podres.io/pods-api: mounted read-only
{{- end }}
{{- if .Values.kubelet.files.enabled }}
podres.io/kubelet-files: config.yaml and device-plugins mounted read-only
{{- end }}
{{- end }}

{{- define "podres.kubeletMounts" -}}
{{- if include "podres.podsApi" . }}
# The kubelet Pods API socket: the DIRECTORY, as the kubelet re-creates the socket.
- name: pods-api
  mountPath: /var/lib/kubelet/pods-api
  readOnly: true
{{- end }}
{{- if .Values.kubelet.files.enabled }}
# The kubelet's configuration: the policies it admits pods with.
- name: kubelet-config
  mountPath: /var/lib/kubelet/config.yaml
  readOnly: true
# The device manager's checkpoint: the DIRECTORY, as the kubelet replaces the file by a
# rename at every write. It also holds the kubelet's registration socket (docs/helm.md).
- name: kubelet-device-plugins
  mountPath: /var/lib/kubelet/device-plugins
  readOnly: true
{{- end }}
{{- end }}

{{- define "podres.kubeletVolumes" -}}
{{- $root := include "podres.kubeletRootDir" . -}}
{{- if include "podres.podsApi" . }}
- name: pods-api
  hostPath:
    path: {{ $root }}/pods-api
    type: Directory
{{- end }}
{{- if .Values.kubelet.files.enabled }}
- name: kubelet-config
  hostPath:
    path: {{ include "podres.kubeletConfigPath" . }}
    type: File
- name: kubelet-device-plugins
  hostPath:
    path: {{ $root }}/device-plugins
    type: Directory
{{- end }}
{{- end }}
