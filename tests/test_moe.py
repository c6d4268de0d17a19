"""MoE: grouped dispatch against a per-token loop, routing invariants, the aux-loss formula,
loss-free bias balancing, and experts that receive no tokens."""

import pytest
import torch

import registry

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
