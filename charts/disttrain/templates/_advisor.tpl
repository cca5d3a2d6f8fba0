{{/*
The advisor's step before training (advisor.enabled): an init container of every trainer pod that runs
disttrain-advise with the trainer's own flags (the same data, model, batch and threads), on the pod's own
resources. With two or more trainer pods, pods 0 and 1 probe the real link between them (the trainer's
Service names and port; the trainer binds that port only after the advisor has exited) and pod 0 prints
the advice; the other pods print where it is. --never-fail: whatever the probe meets, the container exits
0 and training starts as configured. The advice changes nothing by itself.
(list $ jobName).
*/}}
{{- define "disttrain.advisorContainer" -}}
{{- $ctx := index . 0 -}}
{{- $a := $ctx.Values.advisor -}}
- name: advisor
  image: {{ include "disttrain.image" (list $ctx $ctx.Values.trainer.image) | quote }}
  imagePullPolicy: {{ include "disttrain.pullPolicy" (list $ctx $ctx.Values.trainer.image) }}
  command:
    - disttrain-advise
    - --never-fail
    - --budget-seconds
    - {{ $a.budgetSeconds | int | toString | quote }}
    {{- if not (kindIs "invalid" $a.linkMbit) }}
    - --link-mbit
    - {{ $a.linkMbit | toString | quote }}
    {{- end }}
    {{- if not (kindIs "invalid" $a.epochsToTarget) }}
    - --epochs-to-target
    - {{ $a.epochsToTarget | toString | quote }}
    {{- end }}
    {{- if lt (int (include "disttrain.trainerTasks" $ctx)) 2 }}
    - --local-probe
    {{- end }}
  args:
    {{- include "disttrain.trainerArgs" . | nindent 4 }}
  env:
    {{- include "disttrain.env" $ctx | nindent 4 }}
    {{- with include "disttrain.userCodeEnv" $ctx | trim }}{{ . | nindent 4 }}{{ end }}
    {{- with include "disttrain.objectStoreEnv" (list $ctx "trainer") | trim }}{{ . | nindent 4 }}{{ end }}
    {{- with $ctx.Values.trainer.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  securityContext:
    {{- toYaml $ctx.Values.containerSecurityContext | nindent 4 }}
  resources:
    {{- toYaml $ctx.Values.trainer.resources | nindent 4 }}
  {{- include "disttrain.terminationMessage" $ctx | nindent 2 }}
  volumeMounts:
    {{- include "disttrain.volumeMounts" $ctx | nindent 4 }}
    {{- with include "disttrain.objectStoreMount" (list $ctx "trainer") | trim }}{{ . | nindent 4 }}{{ end }}
    {{- with include "disttrain.userCodeMount" $ctx | trim }}{{ . | nindent 4 }}{{ end }}
    {{- with $ctx.Values.trainer.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
