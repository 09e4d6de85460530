"""Resource options for day two of a stack: what must survive every configuration, and what holds an
exclusive attachment.

- What holds results or cached weights is `held()` (components/base.py: `protect` and
  `retain_on_delete`) and is declared outside anything whose existence depends on `node.count`,
  `node.market` or pool mode, so stopping (count 0), resizing, switching to a pool or flipping the
  market never plans its deletion. A hold that moved out of such a component keeps its identity
  through `moved_from()`: an alias naming the URN it had before, so an existing stack sees no
  replacement.
- What holds an exclusive attachment (a VM holding the weights disk, an Azure NIC holding the public
  IP, a volume attachment, a resource with a fixed name) is replaced delete-first (`exclusive()`):
  Pulumi's default replacement creates the new resource while the old one still holds the disk, NIC
  or name, and the create fails. Where the property that changes is not replace-only in the
  provider's schema but the provider's API refuses to update it (Azure's VM priority, Nebius's
  `preemptible`), `replace_on_changes` names it.
"""

from __future__ import annotations

import pulumi


def moved_from(parent_type: str, resource_type: str, name: str) -> str:
    """The URN a resource had as a child of a component of `parent_type` (itself a child of the
    stack), for `aliases`: the resource keeps its identity when it moves to another component."""
    return f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{parent_type}${resource_type}::{name}"


def held_moved(
    parent: pulumi.Resource,
    *,
    aliases: list[str],
    depends_on: list[pulumi.Resource] | None = None,
) -> pulumi.ResourceOptions:
    """Options of a hold (protect, retain on delete) that used to live under another parent."""
    return pulumi.ResourceOptions(
        parent=parent,
        protect=True,
        retain_on_delete=True,
        aliases=list(aliases),
        depends_on=depends_on,
    )


def exclusive(
    parent: pulumi.Resource,
    *,
    replace_on_changes: list[str] | None = None,
    depends_on: list[pulumi.Resource] | None = None,
    ignore_changes: list[str] | None = None,
) -> pulumi.ResourceOptions:
    """Options of a resource that holds an exclusive attachment: replaced delete-first."""
    return pulumi.ResourceOptions(
        parent=parent,
        delete_before_replace=True,
        replace_on_changes=replace_on_changes,
        depends_on=depends_on,
        ignore_changes=ignore_changes,
    )
