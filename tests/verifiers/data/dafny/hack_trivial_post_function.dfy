function Id(x: int): int { x }

method Double(x: int) returns (y: int)
  ensures Id(y) == y
{
  y := 2 * x;
}
