# One cell's registration in the cell map: the cellkit_cell resource with
# its inputs and outputs. The provider is the caller's.

terraform {
  required_providers {
    cellkit = { source = "cellkit/cellkit" }
  }
}

variable "id" {
  type        = string
  description = "The cell id: 1–32 of [a-z0-9-], starting and ending with a letter or digit."
}

variable "intake" {
  type        = string
  description = "Base URL of the cell's intake API."
}

variable "admin" {
  type        = string
  description = "Base URL of the cell's admin API."
}

variable "weight" {
  type        = number
  default     = 1
  description = "Relative share of slots and session quota."
}

variable "capacity" {
  type        = number
  default     = 0
  description = "Requests per second the cell can take (0: none declared); cellctl plans flag a cell projected over it."
}

variable "state" {
  type        = string
  default     = "active"
  description = "\"active\", or \"drained\" to drain it (waits for its queue, up to drain_timeout)."
}

variable "fixed_quota" {
  type        = map(number)
  default     = null
  description = "Sessions per agency fixed for this cell; the others share the rest."
}

variable "drain_timeout" {
  type        = string
  default     = "20m"
  description = "How long a drain may wait for the cell's queue (create, update and destroy)."
}

variable "force_destroy" {
  type        = bool
  default     = false
  description = "On destroy, do not wait for the cell's queue (a cell gone for good)."
}

resource "cellkit_cell" "this" {
  id            = var.id
  intake        = var.intake
  admin         = var.admin
  weight        = var.weight
  capacity      = var.capacity
  state         = var.state
  fixed_quota   = var.fixed_quota
  force_destroy = var.force_destroy

  timeouts {
    create = var.drain_timeout
    update = var.drain_timeout
    delete = var.drain_timeout
  }
}

output "id" {
  value       = cellkit_cell.this.id
  description = "The cell id (reference it from overrides so the cell exists first)."
}

output "state" {
  value       = cellkit_cell.this.state
  description = "The cell's state in the map."
}
