{{/*
The rules for managing coordinated Leases, exactly what `conclave run` does and no more:
- Leases: watch every Lease (get/list/watch), create a missing Lease for its winner, write
  holder/preferredHolder with resourceVersion-checked updates. Never delete.
- LeaseCandidates: watch them, ping (update of spec.pingTime), garbage-collect stale ones
  (delete, after a fresh get). Never create: candidates register themselves.
- Events (events.k8s.io/v1, through kube-runtime's Recorder): Elected, Preempted,
  StrategyConflict, PluginError on Leases; patch bumps the series count of a repeated event.
  Core (v1) Events are not used, so not granted.
- Pods: read only (get/list/watch), for pod liveness (`controller.podLiveness`, on by default):
  the kubelet's report that a holder's container terminated (not a Pod's deletion alone) fails over
  before the Lease expires. Never written; not granted when pod liveness is off. Without it the
  controller logs one warning and fails over at expiry. Unset (a `helm upgrade --reuse-values`
  from a chart without the value) counts as on, as in the flag's default.
Nothing else: no Secrets, ConfigMaps or Namespaces.
*/}}
{{- define "conclave.managedLeaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leasecandidates"]
  verbs: ["get", "list", "watch", "update", "delete"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if ne (.Values.controller.podLiveness | default "on") "off" }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end -}}
