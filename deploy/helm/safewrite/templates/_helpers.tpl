{{/* The chart's name. */}}
{{- define "safewrite.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name, with the chart's unless it has it. */}}
{{- define "safewrite.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "safewrite.selectorLabels" -}}
app.kubernetes.io/name: {{ include "safewrite.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "safewrite.labels" -}}
{{ include "safewrite.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "safewrite.serviceAccountName" -}}
{{- default (include "safewrite.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* Where the controller finds the sidecar: the value of SAFEWRITE_ADDRESS. */}}
{{- define "safewrite.address" -}}
{{- if .Values.sidecar.unixSocket }}
{{- printf "unix://%s" .Values.sidecar.unixSocket }}
{{- else }}
{{- .Values.sidecar.listen }}
{{- end }}
{{- end }}

{{/*
The safewrite native sidecar: one entry of a pod's initContainers. In your own chart,
with this one as a dependency (values under `safewrite`, `controller.enabled: false`):
  initContainers:
    {{- include "safewrite.sidecar" (dict "Values" .Values.safewrite "Chart" (dict "AppVersion" "0.2.0")) | nindent 4 }}
and on your controller container
    - {name: SAFEWRITE_ADDRESS, value: {{ include "safewrite.address" (dict "Values" .Values.safewrite) | quote }}}
plus the volumes of "safewrite.volumes" when sidecar.unixSocket is set.
*/}}
{{- define "safewrite.sidecar" -}}
{{- $health := list "/safewrite" "health" "--address" .Values.sidecar.listen -}}
- name: safewrite
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # A native sidecar: started and ready before the controller, stopped after it.
  restartPolicy: Always
  args: ["serve"]
  env:
    - name: POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    {{- with .Values.sidecar.allow }}
    - {name: SAFEWRITE_ALLOW, value: {{ join " " . | quote }}}
    {{- end }}
    - {name: SAFEWRITE_LISTEN, value: {{ .Values.sidecar.listen | quote }}}
    {{- with .Values.sidecar.unixSocket }}
    - {name: SAFEWRITE_UNIX_SOCKET, value: {{ . | quote }}}
    {{- end }}
    - {name: SAFEWRITE_METRICS_LISTEN, value: {{ .Values.sidecar.metricsListen | quote }}}
    - {name: SAFEWRITE_SHUTDOWN_GRACE, value: {{ .Values.sidecar.shutdownGrace | quote }}}
    - {name: SAFEWRITE_MAX_IN_FLIGHT, value: {{ .Values.sidecar.maxInFlight | quote }}}
    - {name: SAFEWRITE_LOG_FORMAT, value: {{ .Values.sidecar.logFormat | quote }}}
    - {name: TOKIO_WORKER_THREADS, value: {{ .Values.sidecar.workerThreads | quote }}}
    {{- with .Values.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  # `safewrite health` exits 0 when grpc.health.v1 on loopback says SERVING. No
  # liveness probe: an API server outage must not restart the sidecar.
  startupProbe:
    exec:
      command: {{ toJson $health }}
    {{- toYaml .Values.sidecar.startupProbe | nindent 4 }}
  readinessProbe:
    exec:
      command: {{ toJson $health }}
    {{- toYaml .Values.sidecar.readinessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  terminationMessagePolicy: FallbackToLogsOnError
  {{- if .Values.sidecar.unixSocket }}
  volumeMounts:
    - {name: safewrite-socket, mountPath: {{ dir .Values.sidecar.unixSocket | quote }}}
  {{- end }}
{{- end }}

{{/* The pod volumes the sidecar needs (the unix socket's directory), if any. */}}
{{- define "safewrite.volumes" -}}
{{- if .Values.sidecar.unixSocket }}
- name: safewrite-socket
  emptyDir: {medium: Memory, sizeLimit: 1Mi}
{{- end }}
{{- end }}
