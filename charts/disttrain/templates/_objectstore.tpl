{{/*
Object storage (values.yaml, section Object storage): which stages use the store, and what those
stages' pods get: the standard AWS variables, the Secret's key pair by secretKeyRef, a private CA,
a pod label the object-store NetworkPolicy selects. Nothing of it reaches a stage that does not
use the store, nor the server.
*/}}

{{/* Whether a value names an object in a store ("true" or empty). */}}
{{- define "disttrain.isStoreUrl" -}}
{{- if hasPrefix "s3://" (toString .) -}}true{{- end -}}
{{- end -}}

{{/*
Whether a stage uses the store ("true" or empty): (list $ "copier").
  copier      data.source reads an object (table:s3://..., csv:s3://..., npz:s3://...)
  trainer     model.file is an object (the sweep's trials read it too)
  sweep       the same, with sweep.enabled
  aggregator  aggregator.publishTo (it never reads model.file: it loads the workers' models, which
              carry it; giving it the store's key pair for that would be privilege it does not use)
*/}}
{{- define "disttrain.usesObjectStore" -}}
{{- $ctx := index . 0 -}}
{{- $stage := index . 1 -}}
{{- $v := $ctx.Values -}}
{{- $modelFile := include "disttrain.isStoreUrl" $v.model.file -}}
{{- if eq $stage "copier" -}}
{{- if regexMatch "^[a-z]+:s3://" $v.data.source }}true{{ end -}}
{{- else if eq $stage "trainer" -}}
{{- $modelFile -}}
{{- else if eq $stage "sweep" -}}
{{- if $v.sweep.enabled }}{{ $modelFile }}{{ end -}}
{{- else if eq $stage "aggregator" -}}
{{- if $v.aggregator.publishTo }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* The stages that use the store, comma-separated (empty: none). */}}
{{- define "disttrain.objectStoreStages" -}}
{{- $stages := list -}}
{{- range $stage := list "copier" "sweep" "trainer" "aggregator" -}}
{{- if include "disttrain.usesObjectStore" (list $ $stage) }}{{ $stages = append $stages $stage }}{{ end -}}
{{- end -}}
{{- join ", " $stages -}}
{{- end -}}

{{/* The pod label of the stages that use the store: the object-store NetworkPolicy selects it. */}}
{{- define "disttrain.objectStoreLabel" -}}
disttrain.io/object-store: "true"
{{- end -}}

{{/* Pod labels of a stage (list $ "copier"): those of its run, plus the object-store label where it uses the store. */}}
{{- define "disttrain.stagePodLabels" -}}
{{ include "disttrain.runLabels" . }}
{{- if include "disttrain.usesObjectStore" . }}
{{ include "disttrain.objectStoreLabel" (index . 0) }}
{{- end }}
{{- end -}}

{{/* Where the private CA's certificates are mounted (read-only) and the file AWS_CA_BUNDLE names. */}}
{{- define "disttrain.objectStoreCaDir" -}}/etc/disttrain/object-store-ca{{- end -}}
{{- define "disttrain.objectStoreCaFile" -}}{{ include "disttrain.objectStoreCaDir" . }}/ca-bundle.pem{{- end -}}

{{/*
The environment of a stage that uses the store (list $ "copier"; empty for the others): the
standard AWS variables every AWS SDK and tool reads (disttrain_contract.objectstore's docstring).
The key pair comes from the Secret by reference: its values never pass through Helm.
*/}}
{{- define "disttrain.objectStoreEnv" -}}
{{- $ctx := index . 0 -}}
{{- if include "disttrain.usesObjectStore" . -}}
{{- $o := $ctx.Values.objectStore -}}
{{- with $o.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- if and (hasPrefix "http://" $o.endpoint) $o.allowPlainHttp }}
- name: DISTTRAIN_S3_ALLOW_HTTP
  value: "1"
{{- end }}
{{- with $o.region }}
- name: AWS_REGION
  value: {{ . | quote }}
{{- end }}
{{- with $o.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $o.existingSecretKeys.accessKeyId | quote }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $o.existingSecretKeys.secretAccessKey | quote }}
{{- end }}
{{- if $o.caBundle.configMap }}
- name: AWS_CA_BUNDLE
  value: {{ include "disttrain.objectStoreCaFile" $ctx | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "disttrain.objectStoreMount" -}}
{{- if and (include "disttrain.usesObjectStore" .) (index . 0).Values.objectStore.caBundle.configMap }}
- name: object-store-ca
  mountPath: {{ include "disttrain.objectStoreCaDir" (index . 0) }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "disttrain.objectStoreVolume" -}}
{{- $ca := (index . 0).Values.objectStore.caBundle -}}
{{- if and (include "disttrain.usesObjectStore" .) $ca.configMap }}
- name: object-store-ca
  configMap:
    name: {{ $ca.configMap | quote }}
    # 0444 in decimal: YAML 1.1 (Kubernetes) reads 0444 as octal, YAML 1.2 (ruamel, pytest-helm) as 444
    defaultMode: 292
    items:
      - key: {{ $ca.key | quote }}
        path: ca-bundle.pem
{{- end }}
{{- end -}}

{{/* The port the store's pods listen on: objectStore.networkPolicy.port, else the endpoint URL's, else its scheme's (AWS S3: https). */}}
{{- define "disttrain.objectStorePort" -}}
{{- $o := .Values.objectStore -}}
{{- if not (kindIs "invalid" $o.networkPolicy.port) -}}
{{- $o.networkPolicy.port | int -}}
{{- else if $o.endpoint -}}
{{- $url := urlParse $o.endpoint -}}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" -}}
{{- if $port }}{{ $port }}{{ else if eq $url.scheme "http" }}80{{ else }}443{{ end -}}
{{- else -}}
443
{{- end -}}
{{- end -}}

{{/*
The object-store values (the schema says the same; this repeats it for --skip-schema-validation,
with the whole explanation).
*/}}
{{- define "disttrain.validateObjectStore" -}}
{{- $problems := list -}}
{{- $o := .Values.objectStore -}}
{{- $publishTo := .Values.aggregator.publishTo -}}
{{- if and $publishTo (not (regexMatch "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$" $publishTo)) -}}
{{- $problems = append $problems (printf "disttrain: aggregator.publishTo %q must be an s3://BUCKET[/PREFIX] URL (e.g. s3://models/disttrain); the shared volume is always published to" $publishTo) -}}
{{- end -}}
{{- /* the checks that print objectStore.endpoint skip one with a credential (a key pair, never repeated) */ -}}
{{- $endpointPrintable := not (contains "@" $o.endpoint) -}}
{{- if not $endpointPrintable -}}
{{- $problems = append $problems "disttrain: objectStore.endpoint carries a credential (USER:SECRET@ before the host): give the store's address alone, and the key pair in the Secret objectStore.existingSecret names" -}}
{{- end -}}
{{- if and $endpointPrintable (hasPrefix "http://" $o.endpoint) (not $o.allowPlainHttp) -}}
{{- $problems = append $problems (printf "disttrain: objectStore.endpoint %s is plain http: the stages' requests and data would cross the network in clear; use https, or set objectStore.allowPlainHttp=true for a store on a network you trust" $o.endpoint) -}}
{{- end -}}
{{- if and $endpointPrintable $o.endpoint (not (regexMatch "^https?://[^/?#\\s]+/?$" $o.endpoint)) -}}
{{- $problems = append $problems (printf "disttrain: objectStore.endpoint %q must be an http:// or https:// URL without a path (e.g. https://minio.storage.svc:9000)" $o.endpoint) -}}
{{- end -}}
{{- if and $o.endpoint (not $o.existingSecret) -}}
{{- $problems = append $problems "disttrain: objectStore.endpoint names an S3-compatible store, whose credentials the pods cannot get from a cloud's workload identity: set objectStore.existingSecret (a Secret with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name yours in objectStore.existingSecretKeys)" -}}
{{- end -}}
{{- if and $endpointPrintable $o.caBundle.configMap (hasPrefix "http://" $o.endpoint) -}}
{{- $problems = append $problems (printf "disttrain: objectStore.caBundle verifies an https endpoint, and objectStore.endpoint %s is plain http" $o.endpoint) -}}
{{- end -}}
{{- $stages := include "disttrain.objectStoreStages" . -}}
{{- if and $stages .Values.networkPolicy.enabled (not $o.networkPolicy.to) -}}
{{- $problems = append $problems (printf "disttrain: %s use the object store, and networkPolicy.enabled denies their egress: set objectStore.networkPolicy.to to where the store is (e.g. [{ipBlock: {cidr: 10.0.0.0/8}}], or a namespaceSelector and podSelector for a store in the cluster; [{ipBlock: {cidr: 0.0.0.0/0}}] for any address, e.g. AWS S3 without a VPC endpoint)" $stages) -}}
{{- end -}}
{{- join "\n" $problems -}}
{{- end -}}
