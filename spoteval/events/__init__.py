"""The provider's own record of interruptions and state changes, read into the run record.

Each stack exports where it keeps the provider's events (the `event_capture` output: a CloudWatch
Logs group on AWS, a log bucket on GCP, the resource group's Activity Log on Azure, the Job's pods
on Kubernetes; Nebius and Runpod keep none). One reader per provider (aws.py, gcp.py, azure.py,
kubernetes.py; registered in spoteval/events/readers.py as `EVENT_READERS`) turns them into
`ProviderEvent`s; `base.record` writes each as a `preempted` or `stop` event (reason `provider`,
the provider's time, `details.observer: provider_events`) under a create-only key derived from the
provider's event id, so reading twice records nothing twice. match.py counts them with the agent's
own notices without counting a preemption twice; facts.py holds the provider facts they rely on.
`python -m scripts.report --stack NAME --provider-events` runs it (spoteval/report/command.py).
"""
