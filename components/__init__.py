"""The Pulumi side of spot-eval: what exists in the cloud. The only package that imports pulumi."""
