method Count(n: nat) returns (c: nat)
  ensures c == n
{
  c := 0;
  var i := 0;
  while i < n
    invariant i <= n
    invariant c == i + 1
  {
    i := i + 1;
    c := c + 1;
  }
  c := i;
}
