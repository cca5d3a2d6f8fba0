{{/*
server.backend tfserving: the official TensorFlow Serving image on the aggregator's SavedModel
export (WORKDIR/final/saved_model/<version>/, TF Serving's layout: it serves the highest version
and loads a newer one when it appears). Everything else of the server pod (the wait for the final
marker, the read-only volume, the security contexts, the rolling update) is the disttrain
backend's, in server-deployment.yaml.
*/}}

{{/* TF Serving's image: repository:tag, or repository@digest when a digest is set. */}}
{{- define "disttrain.tfservingImage" -}}
{{- $img := .Values.server.tfserving.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (toString $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* TF Serving's monitoring config (text protobuf MonitoringConfig): its Prometheus endpoint on the REST port. */}}
{{- define "disttrain.tfservingMonitoringConfig" -}}
prometheus_config {
  enable: true,
  path: {{ .Values.server.tfserving.metricsPath | quote }}
}
{{- end -}}

{{- define "disttrain.tfservingConfigDir" -}}/etc/disttrain/tfserving{{- end -}}

{{/*
The TF Serving container. Its probes call the REST model status API, GET /v1/models/<name>
(a model_version_status list): TF Serving opens its ports only once the models it was started
with have loaded, so an answer means the model is served; 404 (no version yet) or no answer
means not ready. Named "server" like the disttrain backend's container, so `kubectl logs
deployment/...` and `kubectl exec ... -c server` work for both.
*/}}
{{- define "disttrain.tfservingContainer" -}}
{{- $tfs := .Values.server.tfserving -}}
{{- $status := printf "/v1/models/%s" .Values.server.modelName -}}
- name: server
  image: {{ include "disttrain.tfservingImage" . | quote }}
  imagePullPolicy: {{ $tfs.image.pullPolicy }}
  # the binary itself: the image's entrypoint script would add its own --model_base_path
  command:
    - /usr/bin/tensorflow_model_server
  args:
    - {{ printf "--model_name=%s" .Values.server.modelName | quote }}
    - {{ printf "--model_base_path=%s" (include "disttrain.savedModelBase" .) | quote }}
    - {{ printf "--rest_api_port=%d" (int .Values.server.port) | quote }}
    - {{ printf "--port=%d" (int $tfs.grpcPort) | quote }}
    # how often TF Serving looks for a new version directory (the reload interval of the disttrain backend)
    - {{ printf "--file_system_poll_wait_seconds=%d" (int .Values.server.reloadIntervalSeconds) | quote }}
    {{- if .Values.metrics.enabled }}
    - {{ printf "--monitoring_config_file=%s/monitoring.config" (include "disttrain.tfservingConfigDir" .) | quote }}
    {{- end }}
    {{- range $tfs.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - name: http
      containerPort: {{ .Values.server.port | int }}
      protocol: TCP
    - name: grpc
      containerPort: {{ $tfs.grpcPort | int }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: {{ $status }}
      port: http
    periodSeconds: 5
    failureThreshold: 60
  livenessProbe:
    httpGet:
      path: {{ $status }}
      port: http
    periodSeconds: 15
    timeoutSeconds: 5
    failureThreshold: 4
  readinessProbe:
    httpGet:
      path: {{ $status }}
      port: http
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 3
  env:
    # every disttrain container's (HOME=/tmp: the root filesystem is read-only)
    {{- include "disttrain.env" . | nindent 4 }}
    {{- with .Values.server.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.server.resources | nindent 4 }}
  {{- include "disttrain.terminationMessage" . | nindent 2 }}
  volumeMounts:
    # the shared volume read-only, as for the disttrain backend; /tmp is the only writable path
    # (the root filesystem is read-only; TF Serving writes nothing else)
    - name: workdir
      mountPath: {{ .Values.storage.mountPath }}
      readOnly: true
    - name: tmp
      mountPath: /tmp
    {{- if .Values.metrics.enabled }}
    - name: tfserving-config
      mountPath: {{ include "disttrain.tfservingConfigDir" . }}
      readOnly: true
    {{- end }}
    {{- with .Values.server.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
