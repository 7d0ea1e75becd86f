# Four cells against the file registry of `make run` (var/registry/map.json).
# See README.md: point the CLI at the provider in ./bin, then plan and apply.

terraform {
  required_providers {
    cellkit = { source = "cellkit/cellkit" }
  }
}

variable "registry" {
  type        = string
  default     = "file:../../../var/registry/map.json"
  description = "The registry of the local stack."
}

variable "leave_data" {
  type        = bool
  default     = false
  description = "Change the map even when a cell whose users move does not answer, leaving their inquiries there: for a map whose cells do not run yet (they hold nothing)."
}

provider "cellkit" {
  registry   = var.registry
  leave_data = var.leave_data
}

resource "cellkit_map" "this" {
  agencies = { nice = 80, kcb = 40 }
}

# The ports of `make run`: cell N's intake on 9100+N, admin on 9200+N.
module "cell" {
  source   = "../../modules/cell"
  for_each = { c1 = 1, c2 = 2, c3 = 3, c4 = 4 }

  id         = each.key
  intake     = "http://127.0.0.1:${9100 + each.value}"
  admin      = "http://127.0.0.1:${9200 + each.value}"
  depends_on = [cellkit_map.this]
}

resource "cellkit_override" "vip" {
  user = "vip-user-17"
  cell = module.cell["c3"].id
}

data "cellkit_map" "now" {
  depends_on = [module.cell, cellkit_override.vip]
}

output "cells" {
  value = { for c in data.cellkit_map.now.cells : c.id => "${c.state}, ${c.slots} slots, ${format("%.1f", c.share * 100)}% of users" }
}
