"""English: tensor contracts (issue 2 §3)."""

_FORMS = ("accepted: a dim name (B, T, C, batch), a non-negative integer, '*' (any one dim), "
          "'...' (any number of dims), space- or comma-separated, or a tuple of names and ints")

MESSAGES = {
    "contract.bad_field": "contract fields {fields} are unknown; accepted: shape, dtype, device, contiguous",
    "contract.bad_spec": "contract {spec} is not a spec; accepted: a shape string, a tuple, or a dict of shape/dtype/device/contiguous",
    "contract.bad_shape_type": "shape spec of type {got} is not valid; " + _FORMS,
    "contract.bad_token": "shape spec {shape}: token {token} is not valid; " + _FORMS,
    "contract.two_ellipses": "shape spec {shape}: '...' may appear at most once",
    "contract.bad_dtype": "dtype {got} is not a torch dtype; accepted: torch.float32, 'float32', 'torch.int64', ... or a tuple of them",
    "contract.bad_device": "device {got} is not valid; accepted: 'cpu', 'cuda', 'cuda:0', 'meta', 'mps', a torch.device",
    "contract.bad_contiguous": "contiguous={got} is not valid; accepted: True, False, None",
    "contract.bad_io": "{what} of type {got} is not valid; accepted: one spec (str or dict), a tuple of specs, a dict name -> spec",
    "contract.not_tensor": "expected a Tensor, got {got}",
    "contract.dtype": "dtype is {got}, expected {expected}",
    "contract.device": "device is {got}, expected {expected}",
    "contract.contiguous": "tensor is {got} (stride {stride}), expected {expected}",
    "contract.ndim_at_least": "has {got} dims, expected at least {expected}",
    "contract.ndim": "has {got} dims, expected {expected}",
    "contract.dim_literal": "dim {axis} is {got}, expected {expected}",
    "contract.dim_bound": "dim {axis} is {got}, but {name} was bound to {bound}",
    "contract.no_binding": "none",
    "contract.message": "{where}{tensor}: {detail}",
    "contract.cause.shape": "the tensor's shape breaks the contract (a wrong axis order, batch size or feature size upstream)",
    "contract.cause.dtype": "the tensor has another dtype than the contract",
    "contract.cause.device": "the tensor lives on another device than the contract",
    "contract.cause.contiguous": "transpose/permute/slicing left the tensor with a non-standard memory layout",
    "contract.next.shape": "print {tensor}.shape where it is produced and compare with the named dims bound so far",
    "contract.next.dtype": "cast {tensor} where it is built (.float(), .long())",
    "contract.next.device": "move {tensor} with .to(device) where it is built",
    "contract.next.contiguous": "call .contiguous() on {tensor}, or use .reshape instead of .view downstream",
    "contract.error": (
        "{message}\n"
        "  observed: {observed}\n"
        "  expected: {expected}\n"
        "  dims bound so far: {dims}\n"
        "  other failed fields in this call: {others}"
    ),
}
