# Four cells registered in Consul. The ACL token comes from
# CONSUL_HTTP_TOKEN; the cells' admin token from CELLKIT_ADMIN_TOKEN.

terraform {
  required_providers {
    cellkit = { source = "cellkit/cellkit" }
  }
}

variable "consul" {
  type        = string
  default     = "127.0.0.1:8500"
  description = "HOST:PORT of a Consul agent."
}

variable "cells" {
  type = map(object({ host = string, weight = optional(number, 1), state = optional(string, "active") }))
  default = {
    c1 = { host = "10.0.1.5" }
    c2 = { host = "10.0.1.6" }
    c3 = { host = "10.0.1.7" }
    c4 = { host = "10.0.1.8" }
  }
  description = "The cells: the host their intake (:8081) and admin (:9081) listen on, weight and state."
}

variable "leave_data" {
  type        = bool
  default     = false
  description = "Change the map even when a cell whose users move does not answer, leaving their inquiries there: for a map whose cells do not run yet (they hold nothing)."
}

provider "cellkit" {
  registry   = "consul://${var.consul}/cellkit"
  lock_wait  = "2m"
  leave_data = var.leave_data
}

resource "cellkit_map" "this" {
  agencies = { nice = 80, kcb = 40 }
}

module "cell" {
  source   = "../../modules/cell"
  for_each = var.cells

  id         = each.key
  intake     = "http://${each.value.host}:8081"
  admin      = "http://${each.value.host}:9081"
  weight     = each.value.weight
  state      = each.value.state
  depends_on = [cellkit_map.this]
}

output "map_version" {
  value = data.cellkit_map.now.version
}

data "cellkit_map" "now" {
  depends_on = [module.cell]
}
