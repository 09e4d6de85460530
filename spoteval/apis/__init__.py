"""Each vendor API the project speaks, written once as a small standard-library client.

The node agent, the control planes (`spoteval.clouds`), the event readers (`spoteval.events`) and the
offer prices (`spoteval.offers`) call these. Nothing here imports anything beyond the standard
library and the provider facts (`spoteval.providers`); a vendor SDK, where one is needed, is
imported when called. So the node agent can use every module (tests/test_agent_imports.py), and
the package sits below every other (tests/test_package_edges.py).

- `http`: one request (no proxy) and JSON over HTTP.
- `imds`: the AWS instance metadata service (IMDSv2: its session token, the role's credentials).
- `sigv4`: AWS Signature Version 4 for Query API calls (a GET with a query, a form POST).
- `aws_spot`: the AWS spot price in force, from `DescribeSpotPriceHistory` (XML or SDK entries).
- `gcp_billing`: the Cloud Billing Catalog's Compute Engine SKUs and the price of a machine shape.
- `kubeconfig`: the Kubernetes client's configuration (a kubeconfig, else in the cluster).
- `runpod`: Runpod's REST API v2.

Importing this package imports nothing else.
"""
