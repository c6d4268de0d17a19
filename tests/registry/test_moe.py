"""MoE: grouped dispatch against a per-token loop, routing invariants, the aux-loss formula,
loss-free bias balancing, experts that receive no tokens, and the grouped_mm dispatch against the
per-expert loop (fp32 and CPU bf16 autocast; its CUDA-only constraints are not tested here)."""

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import registry
import registry.core
from minimind import ModelConfig
from registry.mlp import ReluMLP

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny ops, one thread


def moe(dim=16, **options):
    return registry.build("mlp", {"name": "moe", **options}, dim=dim, dropout=0.0)


def naive_moe(module, x):
    """One token at a time: softmax router, top-k, renormalise (k > 1), weighted sum + shared."""
    options = module.options
    tokens = x.reshape(-1, x.size(-1))
    outputs = []
    for token in tokens:
        probs = torch.softmax(module.router.weight.float() @ token.float(), dim=0)
        chosen = torch.topk(probs + module.expert_bias, options.top_k).indices
        weights = probs[chosen]
        if options.top_k > 1:
            weights = weights / weights.sum()
        out = sum(
            w * module.experts[int(e)](token[None])[0] for w, e in zip(weights, chosen, strict=True)
        )
        for shared in module.shared:
            out = out + shared(token[None])[0]
        outputs.append(out)
    return torch.stack(outputs).view_as(x)


@pytest.mark.parametrize(
    "options",
    [
        {"n_experts": 4, "top_k": 2, "n_shared": 1},
        {"n_experts": 5, "top_k": 1},
        {"n_experts": 3, "top_k": 3, "n_shared": 2, "expert": "gelu", "hidden": 12},
        {"n_experts": 6, "top_k": 2, "balance": "bias"},
        {"n_experts": 4, "top_k": 2, "n_shared": 1, "expert": "relu2", "hidden": 24},
    ],
)
def test_grouped_dispatch_equals_per_token_reference(options):
    torch.manual_seed(0)
    module = moe(**options).eval()
    if options.get("balance") == "bias":
        module.expert_bias.copy_(torch.tensor([0.3, -0.2, 0.0, 0.1, -0.4, 0.2]))
    x = torch.randn(2, 7, 16)
    torch.testing.assert_close(module(x), naive_moe(module, x), rtol=0, atol=1e-5)


def test_each_token_goes_to_exactly_top_k_experts_and_all_shared():
    torch.manual_seed(0)
    module = moe(n_experts=4, top_k=2, n_shared=1)
    seen: dict[str, list[torch.Tensor]] = {}

    def record(name):
        return lambda mod, args, out: seen.setdefault(name, []).append(args[0].detach())

    for i, expert in enumerate(module.experts):
        expert.register_forward_hook(record(f"expert{i}"))
    module.shared[0].register_forward_hook(record("shared"))
    x = torch.randn(3, 5, 16)
    module(x)
    tokens = x.reshape(-1, 16)
    assert torch.equal(seen["shared"][0], tokens)  # every token, once
    hits = torch.zeros(len(tokens), dtype=torch.long)
    for i in range(4):
        rows = seen[f"expert{i}"][0]
        matches = (rows[:, None, :] == tokens[None, :, :]).all(-1)  # [rows, N]
        assert torch.equal(matches.sum(1), torch.ones(len(rows), dtype=torch.long))
        per_token = matches.sum(0)
        assert per_token.max() <= 1  # an expert sees a token at most once
        hits += per_token
    assert torch.equal(hits, torch.full((len(tokens),), 2))
    assert module.expert_load.sum().item() == pytest.approx(1.0)


def test_aux_loss_equals_documented_formula():
    torch.manual_seed(0)
    coef, n_experts, top_k = 0.05, 4, 2
    module = moe(n_experts=n_experts, top_k=top_k, aux_loss_coef=coef)
    x = torch.randn(2, 9, 16)
    module(x)
    tokens = x.reshape(-1, 16)
    probs = torch.softmax(tokens @ module.router.weight.T, dim=-1)
    chosen = probs.topk(top_k, dim=-1).indices
    f = torch.zeros(n_experts)
    for row in chosen.tolist():
        for e in row:
            f[e] += 1
    f /= len(tokens) * top_k  # fraction of routed assignments per expert
    p = probs.mean(0)  # mean router probability per expert
    expected = coef * n_experts * (f * p).sum()
    assert module.aux_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    torch.testing.assert_close(module.expert_load, f)
    # a uniform router gives exactly coef, whatever the choice of experts
    torch.nn.init.zeros_(module.router.weight)
    module(x)
    assert module.aux_loss.item() == pytest.approx(coef, rel=1e-6)


def reference_balance_loss(weight, x, coef, top_k, scope):
    """The balance loss written out with loops: per group of tokens (the whole batch, or each
    sequence), E · Σ_i f_i · P_i with f_i the share of the group's top-k choices that went to
    expert i and P_i the group's mean router probability; the groups' losses averaged."""
    n_experts = weight.size(0)
    groups = [x.reshape(-1, x.size(-1))] if scope == "batch" else list(x)
    losses = []
    for tokens in groups:
        probs = torch.softmax(tokens @ weight.T, dim=-1)
        f = torch.zeros(n_experts)
        for row in probs.topk(top_k, dim=-1).indices.tolist():
            for e in row:
                f[e] += 1 / (len(tokens) * top_k)
        losses.append(n_experts * sum(f[i] * probs[:, i].mean() for i in range(n_experts)))
    return coef * sum(losses) / len(losses)


@pytest.mark.parametrize("scope", ["batch", "sequence"])
def test_aux_scopes_equal_their_formulas_in_value_and_router_gradient(scope):
    torch.manual_seed(0)
    coef, top_k = 0.1, 2
    module = moe(n_experts=4, top_k=top_k, aux_loss_coef=coef, aux_scope=scope)
    x = torch.randn(4, 6, 16)
    module(x)
    module.aux_loss.backward()
    weight = module.router.weight.detach().clone().requires_grad_()
    expected = reference_balance_loss(weight, x, coef, top_k, scope)
    expected.backward()
    assert module.aux_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    torch.testing.assert_close(module.router.weight.grad, weight.grad, rtol=1e-5, atol=1e-7)


def test_aux_scopes_agree_at_batch_one_and_differ_above():
    torch.manual_seed(0)
    batch_scope = moe(n_experts=4, top_k=2, aux_scope="batch")
    sequence_scope = moe(n_experts=4, top_k=2, aux_scope="sequence")
    sequence_scope.load_state_dict(batch_scope.state_dict())
    x = torch.randn(4, 6, 16)
    for inputs, equal in ((x[:1], True), (x, False)):
        batch_scope(inputs)
        sequence_scope(inputs)
        same = math.isclose(
            batch_scope.aux_loss.item(), sequence_scope.aux_loss.item(), rel_tol=1e-6
        )
        assert same == equal


def test_the_minimind_moe_preset_balances_per_sequence_as_minimind2():
    _, options = ModelConfig.preset("minimind-moe").component("mlp")
    assert options["aux_scope"] == "sequence" and options["aux_loss_coef"] == 0.1


def test_aux_loss_backpropagates_into_router_and_is_zero_for_bias_balance():
    torch.manual_seed(0)
    module = moe(n_experts=4, top_k=2)
    module(torch.randn(2, 5, 16))
    module.aux_loss.backward()
    assert module.router.weight.grad.abs().sum() > 0
    balanced = moe(n_experts=4, top_k=2, balance="bias")
    balanced(torch.randn(2, 5, 16))
    assert balanced.aux_loss.item() == 0.0


def coefficient_of_variation(load):
    return (load.std(unbiased=False) / load.mean()).item()


def test_bias_balance_moves_skewed_load_toward_uniform():
    torch.manual_seed(0)
    module = moe(n_experts=4, top_k=1, balance="bias", bias_update_rate=0.05)
    with torch.no_grad():  # expert 0 wins most tokens through feature 0, which is always 1
        module.router.weight.normal_(0, 0.3)
        module.router.weight[0, 0] = 3.0
    x = torch.randn(4, 32, 16)
    x[..., 0] = 1.0
    module.eval()
    module(x)
    assert module.expert_bias.abs().sum() == 0  # no update outside training
    start = coefficient_of_variation(module.expert_load)
    assert module.expert_load[0] > 0.8
    module.train()
    late = []
    for step in range(12):
        module(x)
        if step >= 8:  # the sign update settles into a small oscillation around balance
            late.append(coefficient_of_variation(module.expert_load))
    assert sum(late) / len(late) < start / 3
    assert module.expert_bias[0] < 0 < module.expert_bias[1:].min()


def test_expert_without_tokens_still_gets_a_zero_gradient():
    torch.manual_seed(0)
    module = moe(n_experts=4, top_k=2, n_shared=1, balance="bias")
    module.expert_bias.copy_(torch.tensor([0.0, 0.0, 0.0, -10.0]))  # expert 3 is never chosen
    module.eval()
    out = module(torch.randn(2, 6, 16, requires_grad=True))
    (out.square().mean() + module.aux_loss).backward()
    assert module.expert_load[3] == 0
    for name, param in module.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
    assert all(p.grad.abs().sum() == 0 for p in module.experts[3].parameters())
    assert all(p.grad.abs().sum() > 0 for p in module.experts[0].parameters())


def test_moe_param_counts():
    spec = {"name": "moe", "n_experts": 4, "top_k": 2, "n_shared": 1, "hidden": 24}
    module = registry.build("mlp", spec, dim=16, dropout=0.0)
    expert = 3 * 16 * 24  # swiglu
    router = 16 * 4
    assert sum(p.numel() for p in module.parameters()) == router + 5 * expert
    assert registry.count_params("mlp", spec, dim=16, dropout=0.0) == router + 5 * expert
    active = registry.count_params("mlp", spec, active=True, dim=16, dropout=0.0)
    assert active == router + 3 * expert


@pytest.mark.parametrize(
    "options, message",
    [
        ({"top_k": 5}, "top_k \\(5\\) must be <= n_experts \\(4\\)"),
        ({"expert": "moe"}, "dense mlp"),
        ({"expert": "swigloo"}, "did you mean 'swiglu'"),
        ({"balance": "loss"}, "aux_loss|bias"),
    ],
)
def test_moe_option_errors(options, message):
    with pytest.raises(registry.RegistryError, match=message):
        registry.resolve("mlp", {"name": "moe", **options})


# --- dispatch: grouped_mm against loop -------------------------------------------------------

requires_grouped_mm = pytest.mark.skipif(
    not hasattr(F, "grouped_mm"), reason="this torch has no torch.nn.functional.grouped_mm"
)


def loop_and_grouped(dim=16, **options):
    """Two MoE layers with the same weights, one per dispatch (strict load: same parameter names)."""
    loop = moe(dim, dispatch="loop", **options)
    grouped = moe(dim, dispatch="grouped_mm", **options)
    grouped.load_state_dict(loop.state_dict())
    return loop, grouped


def forward_backward(module, x, upstream):
    """Output [B, T, dim], and the gradients of every parameter and of x, by name."""
    x = x.clone().requires_grad_(True)
    out = module(x)
    (out * upstream).sum().add(module.aux_loss).backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    return out, {**grads, "x": x.grad}


NEVER_CHOSEN = -10.0  # a load-balancing bias that keeps an expert from ever being chosen


@requires_grouped_mm
@pytest.mark.parametrize(
    "options",
    [
        {"n_experts": 4, "top_k": 2, "n_shared": 1},
        {"n_experts": 5, "top_k": 1, "expert": "relu", "hidden": 24},
        {"n_experts": 3, "top_k": 2, "n_shared": 2, "expert": "gelu", "hidden": 32},
        {"n_experts": 4, "top_k": 1, "expert": "gelu", "balance": "bias", "empty": 2},
        {"n_experts": 4, "top_k": 2, "n_shared": 1, "balance": "bias", "empty": 3},
        {"n_experts": 4, "top_k": 2, "expert": "relu", "balance": "bias", "empty": 0},
        {"n_experts": 4, "top_k": 2, "n_shared": 1, "expert": "relu2", "hidden": 24},
    ],
    ids=[
        "swiglu-shared",
        "relu-top1",
        "gelu-shared",
        "gelu-top1-empty",
        "swiglu-empty",
        "relu-empty",
        "relu2-shared",
    ],
)
def test_grouped_mm_dispatch_equals_loop_in_outputs_and_gradients(options):
    options = dict(options)
    empty = options.pop("empty", None)
    torch.manual_seed(0)
    loop, grouped = loop_and_grouped(**options)
    x, upstream = torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    if empty is not None:
        for module in (loop, grouped):
            module.expert_bias[empty] = NEVER_CHOSEN
    out_loop, grads_loop = forward_backward(loop.eval(), x, upstream)
    out_grouped, grads_grouped = forward_backward(grouped.eval(), x, upstream)
    torch.testing.assert_close(out_grouped, out_loop, rtol=0, atol=1e-5)
    torch.testing.assert_close(grouped.expert_load, loop.expert_load, rtol=0, atol=0)
    assert grads_grouped.keys() == grads_loop.keys()
    for name, grad in grads_loop.items():
        assert grads_grouped[name] is not None, name  # DDP: no unused parameter
        torch.testing.assert_close(grads_grouped[name], grad, rtol=0, atol=1e-5, msg=name)
    if empty is not None:
        assert grouped.expert_load[empty] == 0
        assert all(p.grad.abs().sum() == 0 for p in grouped.experts[empty].parameters())


@requires_grouped_mm
@pytest.mark.parametrize("expert", ["swiglu", "gelu"])
def test_grouped_mm_runs_in_bf16_under_cpu_autocast_and_agrees_with_loop(expert, monkeypatch):
    torch.manual_seed(0)
    loop, grouped = loop_and_grouped(n_experts=4, top_k=2, n_shared=1, expert=expert)
    x, upstream = torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    operand_dtypes = []
    grouped_mm = F.grouped_mm

    def spy(a, b, **kwargs):
        operand_dtypes.append((a.dtype, b.dtype))
        return grouped_mm(a, b, **kwargs)

    monkeypatch.setattr(F, "grouped_mm", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_loop, grads_loop = forward_backward(loop, x, upstream)
        out_grouped, grads_grouped = forward_backward(grouped, x, upstream)
    assert operand_dtypes and set(operand_dtypes) == {(torch.bfloat16, torch.bfloat16)}
    assert out_grouped.dtype == torch.float32  # the layer hands back its input's dtype
    bf16 = {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(out_grouped, out_loop, **bf16)
    for name, grad in grads_loop.items():
        assert grads_grouped[name].dtype == grad.dtype, name
        torch.testing.assert_close(grads_grouped[name], grad, **bf16, msg=name)


@requires_grouped_mm
def test_grouped_mm_dispatch_reads_no_counts_on_the_host(monkeypatch):
    torch.manual_seed(0)
    _, grouped = loop_and_grouped(n_experts=4, top_k=2)

    def host_read(self, *args):
        raise AssertionError("host read in the grouped dispatch")

    monkeypatch.setattr(torch.Tensor, "tolist", host_read)
    monkeypatch.setattr(torch.Tensor, "item", host_read)
    grouped(torch.randn(2, 7, 16)).sum().backward()


def test_auto_dispatch_is_loop_on_cpu_and_grouped_mm_on_cuda_where_possible(monkeypatch):
    module = moe(n_experts=4, top_k=2)
    assert module.options.dispatch == "auto"
    assert module.resolved_dispatch(torch.device("cpu")) == "loop"
    on_cuda = "grouped_mm" if hasattr(F, "grouped_mm") else "loop"
    assert module.resolved_dispatch(torch.device("cuda")) == on_cuda
    odd_width = moe(n_experts=4, top_k=2, expert="gelu", hidden=12)
    assert odd_width.resolved_dispatch(torch.device("cuda")) == "loop"
    assert moe(dispatch="loop").resolved_dispatch(torch.device("cuda")) == "loop"
    monkeypatch.delattr(F, "grouped_mm", raising=False)
    assert moe(n_experts=4, top_k=2).resolved_dispatch(torch.device("cuda")) == "loop"


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test disappear after it."""
    snapshot = {slot: dict(names) for slot, names in registry.core._names.items()}
    monkeypatch.setattr(registry.core, "_names", snapshot)


class BiasedReluMLP(ReluMLP):
    """A plugin expert: relu with biases on by default."""

    @dataclass(frozen=True)
    class Options(ReluMLP.Options):
        bias: bool = True


class PlainMLP(torch.nn.Module):
    """A plugin expert with no grouped form."""

    def __init__(self, *, dim: int, dropout: float) -> None:
        super().__init__()
        self.down_proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        return self.down_proj(x)


@requires_grouped_mm
def test_grouped_mm_dispatch_errors(scratch_registry):
    registry.register("mlp", "biased-relu")(BiasedReluMLP)
    registry.register("mlp", "plain")(PlainMLP)
    grouped = {"name": "moe", "dispatch": "grouped_mm"}
    with pytest.raises(
        registry.RegistryError, match="mlp 'moe': dispatch grouped_mm: .*bias: true"
    ):
        registry.resolve("mlp", {**grouped, "expert": "biased-relu"})
    with pytest.raises(registry.RegistryError, match="'plain' has no grouped_forward"):
        registry.resolve("mlp", {**grouped, "expert": "plain"})
    with pytest.raises(
        registry.RegistryError, match="multiples of 8; expert matrix sizes \\[12\\]"
    ):
        registry.check_dims("mlp", {**grouped, "expert": "gelu", "hidden": 12}, dim=16, dropout=0.0)
    with pytest.raises(ValueError, match="multiples of 8"):
        moe(dim=20, dispatch="grouped_mm")
    registry.check_dims("mlp", {**grouped, "expert": "gelu", "hidden": 24}, dim=16, dropout=0.0)
    # the same experts under auto (or loop) build and run the loop everywhere
    auto = moe(n_experts=4, expert="biased-relu")
    assert auto.grouped_mm_problem is not None
    assert auto.resolved_dispatch(torch.device("cuda")) == "loop"
    auto(torch.randn(1, 3, 16))


def test_grouped_mm_dispatch_without_torch_support_is_an_error(monkeypatch):
    monkeypatch.delattr(F, "grouped_mm", raising=False)
    with pytest.raises(registry.RegistryError, match="has no torch.nn.functional.grouped_mm"):
        registry.resolve("mlp", {"name": "moe", "dispatch": "grouped_mm"})
