{{/* The release's full name, at most 63 characters. */}}
{{- define "conclave.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the controller's pods. */}}
{{- define "conclave.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "conclave.labels" -}}
{{ include "conclave.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: conclave
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The ServiceAccount the controller runs as. */}}
{{- define "conclave.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "conclave.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The container image, by digest when one is given. */}}
{{- define "conclave.image" -}}
{{- if .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) -}}
{{- fail "image.digest must be sha256:<64 lowercase hex digits>" -}}
{{- end -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The name of the plugins ConfigMap (chart-created or existing). */}}
{{- define "conclave.pluginsConfigMap" -}}
{{- default (printf "%s-plugins" (include "conclave.fullname" .)) .Values.plugins.configMap.existingName -}}
{{- end -}}

{{/* The name of the controller's own high-availability Lease (fixed by the controller). */}}
{{- define "conclave.haLeaseName" -}}conclave-controller{{- end -}}

{{/* The plugins image digest, checked: an image volume is always pinned. */}}
{{- define "conclave.pluginsImageDigest" -}}
{{- $d := required "plugins.image.digest (sha256:...) is required with plugins.source=image" .Values.plugins.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $d) -}}
{{- fail "plugins.image.digest must be sha256:<64 lowercase hex digits>" -}}
{{- end -}}
{{- $d -}}
{{- end -}}
