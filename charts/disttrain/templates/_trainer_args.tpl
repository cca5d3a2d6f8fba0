{{/*
The trainer's command-line flags, one list item each: (list $ jobName). The trainer container and the
advisor's step before it (advisor.enabled) take the same ones, so the advice is about this very run.
*/}}
{{- define "disttrain.trainerArgs" -}}
{{- $ctx := index . 0 -}}
{{- $jobName := index . 1 -}}
{{- $quorum := lt (int (include "disttrain.trainerMinWorkers" $ctx)) (int $ctx.Values.workers) -}}
- --workdir
- {{ include "disttrain.workdir" $ctx | quote }}
- --strategy
- {{ $ctx.Values.strategy | quote }}
- --epochs
- {{ $ctx.Values.epochs | int | toString | quote }}
- --batch
- {{ $ctx.Values.batch | int | toString | quote }}
{{- if not (kindIs "invalid" $ctx.Values.learningRate) }}
- --learning-rate
- {{ $ctx.Values.learningRate | toString | quote }}
{{- end }}
{{- if eq $ctx.Values.strategy "localsgd" }}
{{- with $ctx.Values.syncEvery }}
- --sync-every
- {{ . | int | toString | quote }}
{{- end }}
{{- if eq $ctx.Values.outerOptimizer "nesterov" }}
- --outer-optimizer
- nesterov
- --outer-lr
- {{ $ctx.Values.outerLearningRate | toString | quote }}
- --outer-momentum
- {{ $ctx.Values.outerMomentum | toString | quote }}
{{- end }}
- --outer-overlap
- {{ $ctx.Values.outerOverlap | quote }}
{{- if $ctx.Values.syncAtEpochEnd }}
- --sync-at-epoch-end
{{- end }}
{{- if not (kindIs "invalid" $ctx.Values.syncBatchNormBatches) }}
- --sync-batch-norm-batches
- {{ $ctx.Values.syncBatchNormBatches | int | toString | quote }}
{{- end }}
{{- end }}
{{- with $ctx.Values.optimizer }}
- --optimizer
- {{ . | quote }}
{{- end }}
{{- if has $ctx.Values.strategy (list "multiworker" "localsgd") }}
- --allreduce-dtype
- {{ $ctx.Values.allreduceDtype | quote }}
- --heartbeat-timeout
- {{ $ctx.Values.trainer.heartbeatTimeoutSeconds | int | toString | quote }}
{{- end }}
{{- if eq $ctx.Values.strategy "parameterserver" }}
- --ps
- {{ $ctx.Values.parameterServers | int | toString | quote }}
{{- end }}
- --seed
- {{ $ctx.Values.seed | int | toString | quote }}
{{- if $ctx.Values.sweep.enabled }}
{{- /* the sweep's learning rate, batch, epochs, width and dropout replace the flags above */}}
- --params-from
- {{ printf "%s/sweep/best.json" (include "disttrain.workdir" $ctx) | quote }}
{{- end }}
- --workers
- {{ (int $ctx.Values.workers) | toString | quote }}
- --job
- {{ $jobName | quote }}
- --service
- {{ include "disttrain.trainerServiceName" $ctx | quote }}
- --port
- {{ $ctx.Values.trainer.port | int | toString | quote }}
- --wait-timeout
- {{ $ctx.Values.trainer.waitTimeoutSeconds | int | toString | quote }}
- --peer-wait
- {{ $ctx.Values.trainer.peerWaitSeconds | int | toString | quote }}
- --threads
- {{ $ctx.Values.trainer.threads | int | toString | quote }}
- --malloc
- {{ $ctx.Values.trainer.malloc | quote }}
- --progress-interval
- {{ $ctx.Values.trainer.progressIntervalSeconds | toString | quote }}
{{- if gt (float64 ($ctx.Values.trainer.validationFraction | default 0)) 0.0 }}
- --validation-fraction
- {{ $ctx.Values.trainer.validationFraction | toString | quote }}
{{- end }}
{{- with $ctx.Values.trainer.privacy }}
{{- if not (kindIs "invalid" .l2Clip) }}
- --dp-l2-clip
- {{ .l2Clip | toString | quote }}
- --dp-noise-multiplier
- {{ .noiseMultiplier | toString | quote }}
- --dp-delta
- {{ .delta | toString | quote }}
{{- end }}
{{- end }}
{{- if $quorum }}
- --linger-for-peers
- {{ $ctx.Values.aggregator.stragglerWaitSeconds | int | toString | quote }}
{{- end }}
- --embedding-size
- {{ $ctx.Values.faces.embeddingSize | int | toString | quote }}
- --margin
- {{ $ctx.Values.faces.margin | toString | quote }}
- --views
- {{ $ctx.Values.faces.views | int | toString | quote }}
{{- with $ctx.Values.model.file }}
- --model-file
- {{ . | quote }}
{{- end }}
{{- with include "disttrain.modelModuleArgs" $ctx | trim }}{{ . | nindent 0 }}{{ end }}
{{- end -}}
