{{/*
Names, labels and the pieces every disttrain pod shares.
*/}}

{{/* Chart name, overridable. */}}
{{- define "disttrain.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name: <release>-<chart> unless the release name already contains the chart name. */}}
{{- define "disttrain.fullname" -}}
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

{{/* <fullname>-<suffix>, kept within 63 characters (a DNS label). */}}
{{- define "disttrain.componentName" -}}
{{- $ctx := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $base := include "disttrain.fullname" $ctx | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base $suffix -}}
{{- end -}}

{{/*
Name of a stage's Job: <fullname>-<stage>-r<revision>.

Why the revision is in the name: a Job's pod template is immutable, so a
`helm upgrade` that changed anything in it (args, image, resources) would fail
if it patched the old Job. With the revision in the name every upgrade creates
fresh Jobs (a new training run) and Helm deletes the previous revision's Jobs.
We did not use hooks with `before-hook-creation`: hooks are not part of the
release (no `helm status`, no ownership, no `--wait` on them) and would run the
stages one after the other from Helm's side, while here everything is created
at once and the stages order themselves through the markers.
Six characters are kept free for the "-<index>" an Indexed Job appends to its
pods' hostnames (which must stay within 63 characters).
*/}}
{{- define "disttrain.jobName" -}}
{{- $ctx := index . 0 -}}
{{- $stage := index . 1 -}}
{{- $suffix := printf "%s-r%d" $stage (int $ctx.Release.Revision) -}}
{{- $base := include "disttrain.fullname" $ctx | trunc (int (sub 56 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base $suffix -}}
{{- end -}}

{{- define "disttrain.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable over upgrades (Deployment and Service selectors are immutable). */}}
{{- define "disttrain.selectorLabels" -}}
app.kubernetes.io/name: {{ include "disttrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Common labels of every resource. */}}
{{- define "disttrain.labels" -}}
helm.sh/chart: {{ include "disttrain.chart" . }}
{{ include "disttrain.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: disttrain
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of one component: (list $ "trainer"). */}}
{{- define "disttrain.componentLabels" -}}
{{- $ctx := index . 0 -}}
{{ include "disttrain.labels" $ctx }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "disttrain.componentSelectorLabels" -}}
{{- $ctx := index . 0 -}}
{{ include "disttrain.selectorLabels" $ctx }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Pod labels of a stage's Job: component labels plus the run (revision). */}}
{{- define "disttrain.runLabels" -}}
{{- $ctx := index . 0 -}}
{{ include "disttrain.componentLabels" . }}
disttrain.io/run: {{ printf "r%d" (int $ctx.Release.Revision) | quote }}
{{- end -}}

{{/* The server's, TensorBoard's and the helm test pod's ServiceAccount (disttrain.servingPodCommon). */}}
{{- define "disttrain.servingServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "disttrain.componentName" (list . "serving")) .Values.serviceAccount.servingName -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.servingName -}}
{{- end -}}
{{- end -}}

{{- define "disttrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "disttrain.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Image of a component: (list $ .Values.trainer.image). */}}
{{- define "disttrain.image" -}}
{{- $ctx := index . 0 -}}
{{- $img := index . 1 -}}
{{- $tag := $img.tag | default $ctx.Values.image.tag | default $ctx.Chart.AppVersion -}}
{{- if $ctx.Values.image.registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $ctx.Values.image.registry) $img.repository (toString $tag) -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (toString $tag) -}}
{{- end -}}
{{- end -}}

{{- define "disttrain.pullPolicy" -}}
{{- $ctx := index . 0 -}}
{{- (index . 1).pullPolicy | default $ctx.Values.image.pullPolicy -}}
{{- end -}}

{{/* Names of the shared pieces. */}}
{{- define "disttrain.claimName" -}}
{{- if .Values.storage.existingClaim -}}
{{- .Values.storage.existingClaim -}}
{{- else -}}
{{- include "disttrain.componentName" (list . "workdir") -}}
{{- end -}}
{{- end -}}

{{/* PersistentVolumes are cluster-scoped: the namespace is part of the name. */}}
{{- define "disttrain.pvName" -}}
{{- printf "%s-%s-workdir" (include "disttrain.fullname" .) .Release.Namespace | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{- define "disttrain.trainerServiceName" -}}
{{- include "disttrain.componentName" (list . "workers") -}}
{{- end -}}

{{- define "disttrain.serverName" -}}
{{- include "disttrain.componentName" (list . "server") -}}
{{- end -}}

{{- define "disttrain.nfsServerName" -}}
{{- include "disttrain.componentName" (list . "nfs") -}}
{{- end -}}

{{/* This revision's working directory on the shared volume. */}}
{{- define "disttrain.workdir" -}}
{{- printf "%s/run-%d" (trimSuffix "/" .Values.storage.mountPath) (int .Release.Revision) -}}
{{- end -}}

{{/* Cache of downloaded samples: shared by all runs. */}}
{{- define "disttrain.cacheDir" -}}
{{- printf "%s/.cache" (trimSuffix "/" .Values.storage.mountPath) -}}
{{- end -}}

{{/*
Checks the schema cannot express with a clear message (and repeats the
important ones, for `--skip-schema-validation`). Included by every template
that depends on the storage choice.

Every check below prints its problems, one "disttrain: ..." line each, or
nothing; this one collects them and fails once with all of them, so that a
values file with several mistakes hears of every one in a single `helm` run
(the bitnami charts' `<chart>.validateValues`, e.g. `postgresql.validateValues` in
https://github.com/bitnami/charts/blob/main/bitnami/postgresql/templates/_helpers.tpl):

    Error: execution error at (disttrain/templates/...):
    VALUES VALIDATION:
    disttrain: ...
    disttrain: ...

The checks are independent: each tests its own condition whatever the others
found (only objectStore.endpoint's credential silences the checks that would
print the endpoint).
*/}}
{{- define "disttrain.validate" -}}
{{- $problems := list -}}
{{- $checks := list
      "disttrain.validateStorage" "disttrain.validateWorkers" "disttrain.validateKueue"
      "disttrain.validateExtraVolumes" "disttrain.validateStrategy" "disttrain.validateCombine"
      "disttrain.validatePrivacy" "disttrain.validateLocalSgd" "disttrain.validateExposure"
      "disttrain.validateBackend" "disttrain.validateOwnModel" "disttrain.validateObjectStore"
      "disttrain.validatePublicServer" -}}
{{- range $check := $checks -}}
{{- $problems = append $problems (include $check $ | trim) -}}
{{- end -}}
{{- $problems = without $problems "" -}}
{{- if $problems -}}
{{- fail (printf "\nVALUES VALIDATION:\n%s" (join "\n" $problems)) -}}
{{- end -}}
{{- end -}}

{{/* The shared volume: exactly one source, and an access mode the trainer pods can share across nodes. */}}
{{- define "disttrain.validateStorage" -}}
{{- $problems := list -}}
{{- $s := .Values.storage -}}
{{- $sources := 0 -}}
{{- if $s.existingClaim }}{{ $sources = add1 $sources }}{{ end -}}
{{- if $s.nfs.server }}{{ $sources = add1 $sources }}{{ end -}}
{{- if .Values.nfsServer.enabled }}{{ $sources = add1 $sources }}{{ end -}}
{{- if and (eq (int $sources) 0) (not $s.storageClass) -}}
{{- $problems = append $problems "disttrain: no storage configured for the shared workdir: set one of storage.storageClass (an RWX class, or \"-\" for no class), storage.existingClaim, storage.nfs.server or nfsServer.enabled=true" -}}
{{- end -}}
{{- if gt (int $sources) 1 -}}
{{- $problems = append $problems "disttrain: choose one shared volume: storage.existingClaim, storage.nfs.server and nfsServer.enabled exclude each other" -}}
{{- end -}}
{{- if and (ne $s.accessMode "ReadWriteMany") (gt (int .Values.workers) 1) -}}
{{- $problems = append $problems (printf "disttrain: storage.accessMode %s cannot be shared by %d workers on different nodes: use ReadWriteMany (or workers=1)" $s.accessMode (int .Values.workers)) -}}
{{- end -}}
{{- if and (ne $s.accessMode "ReadWriteMany") (eq .Values.strategy "parameterserver") -}}
{{- $problems = append $problems (printf "disttrain: storage.accessMode %s cannot be shared by the %s trainer pods of strategy parameterserver on different nodes: use ReadWriteMany" $s.accessMode (include "disttrain.trainerTasks" .)) -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/*
workers, and the quorums trainer.minWorkers and aggregator.minWorkers: in 1..workers, and below
workers with strategy average only.
*/}}
{{- define "disttrain.validateWorkers" -}}
{{- $problems := list -}}
{{- if lt (int .Values.workers) 1 -}}
{{- $problems = append $problems (printf "disttrain: workers must be >= 1, got %v" .Values.workers) -}}
{{- end -}}
{{- range $key, $min := dict "trainer.minWorkers" .Values.trainer.minWorkers "aggregator.minWorkers" .Values.aggregator.minWorkers }}
{{- if and (not (kindIs "invalid" $min)) (or (lt (int $min) 1) (gt (int $min) (int $.Values.workers))) -}}
{{- $problems = append $problems (printf "disttrain: %s must be in 1..workers (%d), got %v" $key (int $.Values.workers) $min) -}}
{{- end -}}
{{- if and (not (kindIs "invalid" $min)) (lt (int $min) (int $.Values.workers)) (ne $.Values.strategy "average") -}}
{{- $problems = append $problems (printf "disttrain: %s below workers applies to strategy average only: %s" $key (ternary "a parameterserver chief already carries on without a lost worker, and its model needs no quorum" "multiworker and localsgd all-reduce across every worker, so a run cannot end without one of them" (eq $.Values.strategy "parameterserver"))) -}}
{{- end -}}
{{- end }}
{{- join "\n" $problems -}}
{{- end -}}

{{- define "disttrain.validateKueue" -}}
{{- if and .Values.kueue.trainerTopology.required .Values.kueue.trainerTopology.preferred -}}
disttrain: set at most one of kueue.trainerTopology.required and kueue.trainerTopology.preferred
{{- end -}}
{{- end -}}

{{/* A stage's extraVolumes may not take the names of the chart's volumes in it (a problem per such volume). */}}
{{- define "disttrain.validateExtraVolumes" -}}
{{- $problems := list -}}
{{- range $stage := list "copier" "trainer" "aggregator" "server" }}
{{- $taken := ternary (list "workdir" "tmp" "gallery" "api-token" "tfserving-config" "user-code") (ternary (list "workdir" "tmp" "object-store-ca") (list "workdir" "tmp" "user-code" "object-store-ca") (eq $stage "copier")) (eq $stage "server") }}
{{- range (index $.Values $stage).extraVolumes }}
{{- if has .name $taken -}}
{{- $problems = append $problems (printf "disttrain: %s.extraVolumes: the volume name %q is the chart's own (%s); choose another" $stage .name (join ", " $taken)) -}}
{{- end -}}
{{- end }}
{{- end }}
{{- join "\n" $problems -}}
{{- end -}}

{{- define "disttrain.validateStrategy" -}}
{{- $problems := list -}}
{{- if not (has .Values.strategy (list "average" "multiworker" "localsgd" "parameterserver")) -}}
{{- $problems = append $problems (printf "disttrain: unknown strategy %q: use average, multiworker, localsgd or parameterserver" .Values.strategy) -}}
{{- end -}}
{{- if and (eq .Values.strategy "parameterserver") (lt (int .Values.parameterServers) 1) -}}
{{- $problems = append $problems (printf "disttrain: strategy parameterserver needs parameterServers >= 1, got %v" .Values.parameterServers) -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/* aggregator.combine and the validation split it may rank the workers on (strategy average only). */}}
{{- define "disttrain.validateCombine" -}}
{{- $problems := list -}}
{{- if and (ne .Values.aggregator.combine "average") (ne .Values.strategy "average") -}}
{{- $problems = append $problems (printf "disttrain: aggregator.combine %s needs one model per worker (strategy average); a %s run's workers end with one shared model, which is promoted as it is" .Values.aggregator.combine .Values.strategy) -}}
{{- end -}}
{{- $validation := float64 (.Values.trainer.validationFraction | default 0) -}}
{{- if and (gt $validation 0.0) (ne .Values.strategy "average") -}}
{{- $problems = append $problems (printf "disttrain: trainer.validationFraction applies to strategy average, not %s" .Values.strategy) -}}
{{- end -}}
{{- if and (eq .Values.aggregator.combine "best") (not (gt $validation 0.0)) -}}
{{- $problems = append $problems "disttrain: aggregator.combine best ranks the workers by their validation accuracy: set trainer.validationFraction (e.g. 0.1) so that each worker keeps a validation split" -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/* Differential privacy: the trainer's DP-SGD (trainer.privacy) and the copier's private vocabulary. */}}
{{- define "disttrain.validatePrivacy" -}}
{{- $problems := list -}}
{{- $privacy := .Values.trainer.privacy -}}
{{- $privacySet := list -}}
{{- range $key := list "l2Clip" "noiseMultiplier" "delta" -}}
{{- if not (kindIs "invalid" (index $privacy $key)) -}}{{- $privacySet = append $privacySet $key -}}{{- end -}}
{{- end -}}
{{- if and $privacySet (lt (len $privacySet) 3) -}}
{{- $problems = append $problems (printf "disttrain: trainer.privacy needs l2Clip, noiseMultiplier and delta together (set: %s)" (join ", " $privacySet)) -}}
{{- end -}}
{{- if and $privacySet (eq .Values.strategy "parameterserver") -}}
{{- $problems = append $problems "disttrain: trainer.privacy (DP-SGD) does not support strategy parameterserver: its workers apply their steps asynchronously, so the noise cannot be added once per batch of a known sampling rate; use average, multiworker or localsgd" -}}
{{- end -}}
{{- with .Values.copier.privateVocabulary -}}
{{- if ne (kindIs "invalid" .epsilon) (kindIs "invalid" .delta) -}}
{{- $problems = append $problems "disttrain: copier.privateVocabulary needs epsilon and delta together" -}}
{{- end -}}
{{- if and (kindIs "invalid" .epsilon) (not (kindIs "invalid" .maxTokensPerExample)) -}}
{{- $problems = append $problems "disttrain: copier.privateVocabulary.maxTokensPerExample needs epsilon and delta" -}}
{{- end -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/* The options of the strategies whose workers synchronise: localsgd's outer step, the all-reduce's dtype. */}}
{{- define "disttrain.validateLocalSgd" -}}
{{- $problems := list -}}
{{- if and (not (kindIs "invalid" .Values.syncEvery)) (ne .Values.strategy "localsgd") -}}
{{- $problems = append $problems (printf "disttrain: syncEvery applies to strategy localsgd, not %s" .Values.strategy) -}}
{{- end -}}
{{- if and .Values.sweep.space.syncEvery (ne .Values.strategy "localsgd") -}}
{{- $problems = append $problems (printf "disttrain: sweep.space.syncEvery is searched by localsgd trials only, and strategy is %s" .Values.strategy) -}}
{{- end -}}
{{- if and (ne .Values.outerOptimizer "none") (ne .Values.strategy "localsgd") -}}
{{- $problems = append $problems (printf "disttrain: outerOptimizer applies to strategy localsgd, not %s" .Values.strategy) -}}
{{- end -}}
{{- if and (ne .Values.outerOverlap "none") (ne .Values.strategy "localsgd") -}}
{{- $problems = append $problems (printf "disttrain: outerOverlap applies to strategy localsgd, not %s" .Values.strategy) -}}
{{- end -}}
{{- if and .Values.syncAtEpochEnd (ne .Values.strategy "localsgd") -}}
{{- $problems = append $problems (printf "disttrain: syncAtEpochEnd applies to strategy localsgd, not %s" .Values.strategy) -}}
{{- end -}}
{{- if and .Values.syncAtEpochEnd (ne .Values.outerOverlap "none") -}}
{{- $problems = append $problems (printf "disttrain: syncAtEpochEnd does not go with outerOverlap %s: an overlapped sync applies its exchange one sync late, so an epoch's end would not hold the group's model" .Values.outerOverlap) -}}
{{- end -}}
{{- if and (has .Values.allreduceDtype (list "int8" "int4")) (ne .Values.strategy "localsgd") -}}
{{- $problems = append $problems (printf "disttrain: allreduceDtype %s applies to strategy localsgd, not %s (TensorFlow's all-reduce refuses int8; use float16)" .Values.allreduceDtype .Values.strategy) -}}
{{- end -}}
{{- if and (ne .Values.allreduceDtype "float32") (not (has .Values.strategy (list "multiworker" "localsgd"))) -}}
{{- $problems = append $problems (printf "disttrain: allreduceDtype applies to the strategies whose workers all-reduce (multiworker, localsgd), not %s" .Values.strategy) -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/*
Your own model and data (values.yaml, section Your own model; the schema says the same, this
repeats it for --skip-schema-validation).
*/}}
{{- define "disttrain.validateOwnModel" -}}
{{- $problems := list -}}
{{- $m := .Values.model -}}
{{- $d := .Values.data -}}
{{- if and $m.module (not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?$" $m.module)) -}}
{{- $problems = append $problems (printf "disttrain: model.module %q is not MODULE[:FUNCTION] (e.g. mymodels.tabular:build)" $m.module) -}}
{{- end -}}
{{- if and $m.file (not (regexMatch "^(/.*|s3://[^/]+/.+)\\.keras$" $m.file)) -}}
{{- $problems = append $problems (printf "disttrain: model.file %q must be the absolute path of a .keras file in the trainer pods (e.g. %s/models/mine.keras) or an object in a store (s3://BUCKET/KEY.keras)" $m.file (trimSuffix "/" .Values.storage.mountPath)) -}}
{{- end -}}
{{- if and (include "disttrain.ownModel" .) (or (eq $d.task "faces") (eq $d.source "sample:faces")) -}}
{{- $problems = append $problems "disttrain: model.file and model.module train the table, array, image and text tasks; faces trains its built-in embedding: unset them, or use another data.source/data.task" -}}
{{- end -}}
{{- if and $m.code $m.codeConfigMap -}}
{{- $problems = append $problems "disttrain: set at most one of model.code and model.codeConfigMap" -}}
{{- end -}}
{{- if and (or $m.code $m.codeConfigMap) (not $m.module) -}}
{{- $problems = append $problems "disttrain: model.code and model.codeConfigMap are imported through model.module: set model.module (MODULE[:FUNCTION])" -}}
{{- end -}}
{{- if and $d.labelColumn (not (hasPrefix "table:" $d.source)) -}}
{{- $problems = append $problems (printf "disttrain: data.labelColumn applies to data.source table:PATH only, not %s" $d.source) -}}
{{- end -}}
{{- if not (has $d.problem (list "classification" "regression")) -}}
{{- $problems = append $problems (printf "disttrain: unknown data.problem %q: use classification or regression" (toString $d.problem)) -}}
{{- end -}}
{{- if and (eq $d.problem "regression") (not (or (hasPrefix "table:" $d.source) (hasPrefix "npz:" $d.source))) -}}
{{- $problems = append $problems (printf "disttrain: data.problem regression needs a numeric target: data.source table:PATH or npz:PATH, not %s" $d.source) -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/* Whether the trainer trains the user's model ("true" or empty). */}}
{{- define "disttrain.ownModel" -}}
{{- if or .Values.model.file .Values.model.module -}}true{{- end -}}
{{- end -}}

{{/* The ConfigMap of the user's model code: model.codeConfigMap, or the one the chart renders from model.code; empty = none. */}}
{{- define "disttrain.modelCodeConfigMap" -}}
{{- if .Values.model.codeConfigMap -}}
{{- .Values.model.codeConfigMap -}}
{{- else if .Values.model.code -}}
{{- include "disttrain.componentName" (list . "model-code") -}}
{{- end -}}
{{- end -}}

{{/* Where the model code is mounted (read-only), and PYTHONPATH with it. */}}
{{- define "disttrain.userCodeDir" -}}/opt/disttrain/user-code{{- end -}}

{{/* --model-module of the trainer, aggregator and server (args list entries; empty without model.module). */}}
{{- define "disttrain.modelModuleArgs" -}}
{{- with .Values.model.module }}
- --model-module
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
The environment of a container that imports the user's code from the ConfigMap: PYTHONPATH, and no
bytecode written (the mount and the root filesystem are read-only; the images set it too, a derived
image may not). Not PYTHONPYCACHEPREFIX: with it Python would also look for every library's bytecode
under that prefix only, and recompile TensorFlow's at every start.
*/}}
{{- define "disttrain.userCodeEnv" -}}
{{- if include "disttrain.modelCodeConfigMap" . }}
- name: PYTHONPATH
  value: {{ include "disttrain.userCodeDir" . | quote }}
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end }}
{{- end -}}

{{- define "disttrain.userCodeMount" -}}
{{- if include "disttrain.modelCodeConfigMap" . }}
- name: user-code
  mountPath: {{ include "disttrain.userCodeDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "disttrain.userCodeVolume" -}}
{{- with include "disttrain.modelCodeConfigMap" . }}
- name: user-code
  configMap:
    name: {{ . }}
    # 0444 in decimal: YAML 1.1 (Kubernetes) reads 0444 as octal, YAML 1.2 (ruamel, pytest-helm) as 444
    defaultMode: 292
{{- end }}
{{- end -}}

{{/*
server.backend (the schema says the same; this repeats it for --skip-schema-validation). With
tfserving, what promises a protection TF Serving cannot give is refused; our server's other
settings are ignored (values.yaml, section Server, says which and why).
*/}}
{{- define "disttrain.validateBackend" -}}
{{- $problems := list -}}
{{- $s := .Values.server -}}
{{- if not (has $s.backend (list "disttrain" "tfserving")) -}}
{{- $problems = append $problems (printf "disttrain: unknown server.backend %q: use disttrain (our server) or tfserving (the official TensorFlow Serving image on the exported SavedModel)" (toString $s.backend)) -}}
{{- end -}}
{{- if eq $s.backend "tfserving" -}}
{{- if not (has "saved_model" .Values.aggregator.exports) -}}
{{- $problems = append $problems "disttrain: server.backend tfserving serves the SavedModel the aggregator exports: keep saved_model in aggregator.exports" -}}
{{- end -}}
{{- if $s.auth.enabled -}}
{{- $problems = append $problems "disttrain: server.backend tfserving checks no API token: set server.auth.enabled=false and restrict who reaches it (server.service.type ClusterIP, server.service.loadBalancerSourceRanges, server.networkPolicy.allowFrom, or an authenticating gateway in front)" -}}
{{- end -}}
{{- if $s.allowedHosts -}}
{{- $problems = append $problems "disttrain: server.backend tfserving answers any Host header: server.allowedHosts applies to the disttrain backend only; leave it empty (an Ingress with hosts filters by host)" -}}
{{- end -}}
{{- if and (eq $s.service.type "LoadBalancer") (not $s.service.loadBalancerSourceRanges) (not $s.service.allowPublicUnauthenticated) -}}
{{- $problems = append $problems "disttrain: server.backend tfserving behind a LoadBalancer with no server.service.loadBalancerSourceRanges lets anyone on the network call the model (TF Serving checks no token): use server.service.type ClusterIP or loadBalancerSourceRanges, or accept it with server.service.allowPublicUnauthenticated=true" -}}
{{- end -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/* Whether the server is TF Serving ("true" or empty). */}}
{{- define "disttrain.tfserving" -}}
{{- if eq .Values.server.backend "tfserving" -}}true{{- end -}}
{{- end -}}

{{/* TF Serving's base path: the aggregator's SavedModel export, one numeric directory per version (TF Serving's layout). */}}
{{- define "disttrain.savedModelBase" -}}
{{- printf "%s/final/saved_model" (include "disttrain.workdir" .) -}}
{{- end -}}

{{/* The port /metrics answers on: server.metricsPort (our server's --metrics-port), TF Serving's HTTP port. */}}
{{- define "disttrain.metricsPort" -}}
{{- ternary .Values.server.port .Values.server.metricsPort (eq (include "disttrain.tfserving" .) "true") | int | toString -}}
{{- end -}}

{{/* The server's API ports as NetworkPolicy port entries: HTTP, plus TF Serving's gRPC. */}}
{{- define "disttrain.serverApiPorts" -}}
- protocol: TCP
  port: {{ .Values.server.port | int }}
{{- if include "disttrain.tfserving" . }}
- protocol: TCP
  port: {{ .Values.server.tfserving.grpcPort | int }}
{{- end }}
{{- end -}}

{{/* Pod-level settings of the stages' pods (the release's ServiceAccount: the object store's
workload identity, through serviceAccount.annotations, is theirs). */}}
{{- define "disttrain.podCommon" -}}
{{ include "disttrain.podSettings" (list . (include "disttrain.serviceAccountName" .)) }}
{{- end -}}

{{/* The same for the pods that face clients or run no stage (the server, TensorBoard, the helm
test pod): their own ServiceAccount, without serviceAccount.annotations, so a workload identity
meant for the object store never reaches the public server. */}}
{{- define "disttrain.servingPodCommon" -}}
{{ include "disttrain.podSettings" (list . (include "disttrain.servingServiceAccountName" .)) }}
{{- end -}}

{{/* Pod-level settings every disttrain pod shares: (list $ serviceAccountName). */}}
{{- define "disttrain.podSettings" -}}
{{- $ctx := index . 0 -}}
serviceAccountName: {{ index . 1 }}
automountServiceAccountToken: false
{{- with $ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $ctx.Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Scheduling of a stage's pods: (list $ .Values.copier). */}}
{{- define "disttrain.scheduling" -}}
{{- $ctx := index . 0 -}}
{{- $stage := index . 1 -}}
{{- with ($stage.nodeSelector | default $ctx.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($stage.tolerations | default $ctx.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($stage.affinity | default $ctx.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- include "disttrain.podClasses" (list $ctx $stage) }}
{{- end -}}

{{/* priorityClassName, runtimeClassName and schedulerName of a stage's pods (the stage's own wins): (list $ .Values.copier). */}}
{{- define "disttrain.podClasses" -}}
{{- $ctx := index . 0 -}}
{{- $stage := index . 1 -}}
{{- range $key := list "priorityClassName" "runtimeClassName" "schedulerName" }}
{{- with (index $stage $key | default (index $ctx.Values $key)) }}
{{ $key }}: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Kueue labels of every Job: the LocalQueue (Kueue admits the Job's pods all at once) and the priority class. */}}
{{- define "disttrain.kueueLabels" -}}
{{- with .Values.kueue.queueName }}
kueue.x-k8s.io/queue-name: {{ . | quote }}
{{- end }}
{{- with .Values.kueue.priorityClass }}
kueue.x-k8s.io/priority-class: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Volumes every disttrain pod mounts: the shared workdir and a scratch /tmp. */}}
{{- define "disttrain.volumes" -}}
- name: workdir
  persistentVolumeClaim:
    claimName: {{ include "disttrain.claimName" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{- define "disttrain.volumeMounts" -}}
- name: workdir
  mountPath: {{ .Values.storage.mountPath }}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/*
podFailurePolicy rules of a stage Job (list $ctx containerName exitCode
[ignoredExitCode]): an eviction or preemption (DisruptionTarget) is not counted
against the retries; the exit code (a failure a retry cannot change) fails the
Job at once; the optional ignored exit code (the trainer's: saved on SIGTERM,
start me again) is not counted either, which covers a plain pod delete (no
DisruptionTarget condition) too.
Needs restartPolicy Never and Kubernetes >= 1.26 (the caller checks).
*/}}
{{- define "disttrain.podFailurePolicyRules" -}}
{{- $ctx := index . 0 -}}
{{- /* The 1.26-1.28.0 OpenAPI wrongly marks onPodConditions required (fixed in
1.29 and later 1.28 patches); an empty list satisfies client-side validators and means "unset". */ -}}
{{- $oldOpenAPI := semverCompare "<1.29.0-0" $ctx.Capabilities.KubeVersion.Version -}}
rules:
  - action: Ignore
    onPodConditions:
      - type: DisruptionTarget
        status: "True"
  - action: FailJob
    {{- if $oldOpenAPI }}
    onPodConditions: []
    {{- end }}
    onExitCodes:
      containerName: {{ index . 1 }}
      operator: In
      values: [{{ index . 2 }}]
  {{- if gt (len .) 3 }}
  - action: Ignore
    {{- if $oldOpenAPI }}
    onPodConditions: []
    {{- end }}
    onExitCodes:
      containerName: {{ index . 1 }}
      operator: In
      values: [{{ index . 3 }}]
  {{- end }}
{{- end -}}

{{/*
Every container's termination message: the stages write their one-line error to
/dev/termination-log (disttrain_contract.run_cli), and without one (a crash, a
wait container's timeout) the kubelet keeps the log's last lines, so `kubectl get
pods` / `kubectl describe pod` say why a stage failed without reading its logs.
*/}}
{{- define "disttrain.terminationMessage" -}}
terminationMessagePath: /dev/termination-log
terminationMessagePolicy: FallbackToLogsOnError
{{- end -}}

{{/* Environment of every disttrain container (read-only root: everything writable is /tmp or the workdir). */}}
{{- define "disttrain.env" -}}
- name: HOME
  value: /tmp
- name: MPLCONFIGDIR
  value: /tmp
- name: PYTHONUNBUFFERED
  value: "1"
- name: DISTTRAIN_WORKDIR
  value: {{ include "disttrain.workdir" . | quote }}
- name: DISTTRAIN_CACHE
  value: {{ include "disttrain.cacheDir" . | quote }}
{{- end -}}

{{/*
An init container that waits for marker files on the shared volume, with the
component's own image and its python (no shell or busybox needed):
(list $ "name" .Values.trainer.image timeoutSeconds "what" (list paths...)).
Exits 0 once every path exists, 3 on timeout (like the stages' StageTimeout).
*/}}
{{- define "disttrain.waitContainer" -}}
{{- $ctx := index . 0 -}}
{{- $image := index . 2 -}}
- name: {{ index . 1 }}
  image: {{ include "disttrain.image" (list $ctx $image) | quote }}
  imagePullPolicy: {{ include "disttrain.pullPolicy" (list $ctx $image) }}
  command:
    - python
    - -c
    - |
      import os, sys, time
      timeout, poll, what = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
      paths = sys.argv[4:]
      deadline = time.monotonic() + timeout
      print(f"waiting up to {timeout:g}s for {what}: {len(paths)} marker(s), e.g. {paths[0]}", flush=True)
      while True:
          missing = [p for p in paths if not os.path.exists(p)]
          if not missing:
              print(f"{what}: ready", flush=True)
              sys.exit(0)
          if time.monotonic() >= deadline:
              print(f"timed out after {timeout:g}s waiting for {what}; still missing: {', '.join(missing)}", file=sys.stderr, flush=True)
              sys.exit(3)
          time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
    - {{ index . 3 | int | toString | quote }}
    - {{ $ctx.Values.waitContainer.pollSeconds | toString | quote }}
    - {{ index . 4 | quote }}
    {{- range (index . 5) }}
    - {{ . | quote }}
    {{- end }}
  env:
    {{- include "disttrain.env" $ctx | nindent 4 }}
  securityContext:
    {{- toYaml $ctx.Values.containerSecurityContext | nindent 4 }}
  resources:
    {{- toYaml $ctx.Values.waitContainer.resources | nindent 4 }}
  {{- include "disttrain.terminationMessage" $ctx | nindent 2 }}
  volumeMounts:
    {{- include "disttrain.volumeMounts" $ctx | nindent 4 }}
{{- end -}}

{{/* Marker paths (contract: disttrain_contract/layout.py). */}}
{{- define "disttrain.dataMarker" -}}
{{- printf "%s/data/_SUCCESS" (include "disttrain.workdir" .) -}}
{{- end -}}

{{- define "disttrain.sweepMarker" -}}
{{- printf "%s/sweep/_SUCCESS" (include "disttrain.workdir" .) -}}
{{- end -}}

{{- define "disttrain.finalMarker" -}}
{{- printf "%s/final/_SUCCESS" (include "disttrain.workdir" .) -}}
{{- end -}}

{{- define "disttrain.workerMarkers" -}}
{{- $wd := include "disttrain.workdir" . -}}
{{- range $i := until (int (include "disttrain.trainerTasks" .)) }}
- {{ printf "%s/train/worker-%05d/_SUCCESS" $wd $i }}
{{- end }}
{{- end -}}

{{/* Quorum (strategy average): how many trainer indexes must succeed, and how many workers the
aggregator averages at least (default: the trainer's). Equal to workers unless trainer.minWorkers is set. */}}
{{- define "disttrain.trainerMinWorkers" -}}
{{- if kindIs "invalid" .Values.trainer.minWorkers }}{{ int .Values.workers }}{{ else }}{{ int .Values.trainer.minWorkers }}{{ end -}}
{{- end -}}

{{- define "disttrain.aggregatorMinWorkers" -}}
{{- if kindIs "invalid" .Values.aggregator.minWorkers }}{{ include "disttrain.trainerMinWorkers" . }}{{ else }}{{ int .Values.aggregator.minWorkers }}{{ end -}}
{{- end -}}

{{/* Whether the trainers talk to each other (TF_CONFIG, the collective port). */}}
{{- define "disttrain.trainersConnected" -}}
{{- if has .Values.strategy (list "multiworker" "localsgd" "parameterserver") -}}true{{- end -}}
{{- end -}}

{{/* Pods of the trainer Indexed Job: the workers; parameterserver: 1 chief + parameterServers + workers. */}}
{{- define "disttrain.trainerTasks" -}}
{{- if eq .Values.strategy "parameterserver" -}}
{{- add 1 (int .Values.parameterServers) (int .Values.workers) -}}
{{- else -}}
{{- int .Values.workers -}}
{{- end -}}
{{- end -}}

{{/* The API token's Secret: server.auth.existingSecret, else the one the chart generates (auth-secret.yaml). */}}
{{- define "disttrain.authSecretName" -}}
{{- .Values.server.auth.existingSecret | default (include "disttrain.componentName" (list . "api-token")) -}}
{{- end -}}

{{- define "disttrain.authSecretKey" -}}
{{- if .Values.server.auth.existingSecret }}{{ .Values.server.auth.existingSecretKey }}{{ else }}token{{ end -}}
{{- end -}}

{{/* Where the server and the helm test pod read the token (a read-only Secret volume). */}}
{{- define "disttrain.apiTokenDir" -}}/etc/disttrain/api-token{{- end -}}
{{- define "disttrain.apiTokenFile" -}}{{ include "disttrain.apiTokenDir" . }}/token{{- end -}}

{{- define "disttrain.apiTokenVolume" -}}
- name: api-token
  secret:
    secretName: {{ include "disttrain.authSecretName" . }}
    # 0440 in decimal: YAML 1.1 (Kubernetes) reads 0440 as octal, YAML 1.2 (ruamel, pytest-helm) as 440
    defaultMode: 288
    items:
      - key: {{ include "disttrain.authSecretKey" . }}
        path: token
{{- end -}}

{{- define "disttrain.apiTokenMount" -}}
- name: api-token
  mountPath: {{ include "disttrain.apiTokenDir" . }}
  readOnly: true
{{- end -}}

{{/*
A server others can reach from outside the cluster (a LoadBalancer with no source ranges, or the
Ingress): face search needs the token unless server.auth.publicFaceSearch says it is public, and
a LoadBalancer or an Ingress answers only its host names (DNS rebinding).
*/}}
{{- define "disttrain.validatePublicServer" -}}
{{- $problems := list -}}
{{- $svc := .Values.server.service -}}
{{- $public := or (and (eq $svc.type "LoadBalancer") (not $svc.loadBalancerSourceRanges)) .Values.server.ingress.enabled -}}
{{- if and (ne .Values.server.backend "tfserving") $public (not .Values.server.auth.enabled) (not .Values.server.auth.publicFaceSearch) (not $svc.allowPublicUnauthenticated) -}}
{{- $problems = append $problems "disttrain: a public server (a LoadBalancer with no server.service.loadBalancerSourceRanges, or server.ingress) with no API token (server.auth.enabled=false) lets anyone search the face gallery and read the enrolled people's names and faces. Set server.auth.enabled=true or loadBalancerSourceRanges, or accept it with server.auth.publicFaceSearch=true" -}}
{{- end -}}
{{- if and (ne .Values.server.backend "tfserving") (or (eq $svc.type "LoadBalancer") .Values.server.ingress.enabled) (not (include "disttrain.serverHosts" . | trim)) -}}
{{- $problems = append $problems "disttrain: a LoadBalancer or Ingress server with no host names (server.allowedHosts empty, and no server.ingress.hosts) answers any Host header, so a page on another site can call its API through DNS rebinding: set server.allowedHosts to the names (or the load balancer's IP) clients use, e.g. {demo.example.com}, or put it behind server.ingress with hosts" -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}

{{/* The Host names the server answers, comma-separated: server.allowedHosts, else the Ingress' hosts (empty: any). */}}
{{- define "disttrain.serverHosts" -}}
{{- if .Values.server.allowedHosts -}}
{{- join "," .Values.server.allowedHosts -}}
{{- else if .Values.server.ingress.enabled -}}
{{- $hosts := list -}}
{{- range .Values.server.ingress.hosts }}{{ if .host }}{{ $hosts = append $hosts .host }}{{ end }}{{ end -}}
{{- join "," $hosts -}}
{{- end -}}
{{- end -}}

{{/* The face gallery: its own writable mount (the server mounts the shared volume read-only). */}}
{{- define "disttrain.galleryMountPath" -}}/var/lib/disttrain/gallery{{- end -}}
{{- define "disttrain.gallerySubPath" -}}gallery{{- end -}}

{{/*
Whether the server is published with nothing in the way: a LoadBalancer without source
ranges, a gallery anyone can write to and no token. The chart refuses it unless
server.service.allowPublicUnauthenticated (the schema says the same; this repeats it for
--skip-schema-validation, with the whole explanation).
*/}}
{{- define "disttrain.validateExposure" -}}
{{- $problems := list -}}
{{- $svc := .Values.server.service -}}
{{- if and (ne .Values.server.backend "tfserving") (eq $svc.type "LoadBalancer") (not $svc.loadBalancerSourceRanges) (not .Values.server.gallery.readOnly) (not .Values.server.auth.enabled) (not $svc.allowPublicUnauthenticated) -}}
{{- $problems = append $problems "disttrain: server.service.type LoadBalancer with no server.service.loadBalancerSourceRanges, a writable gallery (server.gallery.readOnly=false) and no API token (server.auth.enabled=false) lets anyone on the network enrol and delete face photos. Set server.auth.enabled=true, server.gallery.readOnly=true or loadBalancerSourceRanges, or accept it with server.service.allowPublicUnauthenticated=true" -}}
{{- end -}}
{{- if and .Values.nfsServer.enabled .Values.networkPolicy.enabled (not .Values.nfsServer.networkPolicy.allowedCIDRs) -}}
{{- $problems = append $problems "disttrain: nfsServer.enabled with networkPolicy.enabled needs nfsServer.networkPolicy.allowedCIDRs: the CIDR(s) of your nodes, which mount the export (it is rw,no_root_squash: no other peer may reach it)" -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}
